/**
 * What a provider agent (agent.ts) reports: the snapshot a status line and the state file show, and why
 * it stopped. Never content: ids, counts and phases.
 */
import type { ModelWarning } from "../protocol/frames.ts";

export type AgentPhase = "connecting" | "connected" | "reconnecting" | "draining" | "stopped";

export interface AgentState {
  readonly phase: AgentPhase;
  readonly connected: boolean;
  readonly providerId?: string;
  readonly trustLevel?: string;
  readonly models: readonly string[];
  readonly active: number;
  readonly maxConcurrency: number;
  readonly requestsServed: number;
  readonly tokensServed: number;
  /** Welcomes received since start (1 after the first connection). */
  readonly sessions: number;
  /** The current welcome's `model_warnings`: served ids the coordinator routes nothing to (aliases, unknown). */
  readonly modelWarnings?: readonly ModelWarning[];
  /** Why the coordinator is refused (its attestation failed a check; --coordinator-image); absent once connected. */
  readonly refused?: string;
}

export type AgentExitReason = "stopped" | "drained" | "unauthorized" | "version";

export interface AgentExit {
  readonly reason: AgentExitReason;
  /** A sentence for the operator; never content. */
  readonly message: string;
}
