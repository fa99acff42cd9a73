/**
 * A counter and a histogram for per-request paths without prom-client's garbage per call: its inc and
 * observe build a labels object, a hash string and a closure every time (8 to 21 objects; bench/HISTORY.md).
 * Here a label set's cell is found through nested Maps of its values (no string built per call) and holds
 * plain numbers, and prom-client's registry renders them: a TalliedCounter hands its counts to a
 * prom-client Counter when the registry collects; a TalliedHistogram is a metric of the shape prom-client's
 * registry renders, line for line as a prom-client Histogram (test/unit/observability/tallies.test.ts
 * compares the two). At most three labels; values are strings or numbers (shown as String(value)).
 */
import { Counter, type Metric, type Registry } from "prom-client";

type Value = string | number;
type Labels = Record<string, string>;

/** One cell per label set, in order of first use. */
class Cells<C extends { readonly labels: Labels }> {
  readonly list: C[] = [];
  private readonly root = new Map<Value, unknown>();
  private only: C | undefined;

  constructor(
    readonly names: readonly string[],
    private readonly make: (labels: Labels) => C,
  ) {
    if (names.length > 3) throw new RangeError("at most three labels");
  }

  /** The cell of the values given, one per label in order (the rest ignored). */
  get(a: Value, b: Value, c: Value): C {
    const n = this.names.length;
    if (n === 0) {
      this.only ??= this.add([]);
      return this.only;
    }
    let level = this.root;
    if (n > 1) level = this.level(level, a);
    if (n > 2) level = this.level(level, b);
    const last = n === 1 ? a : n === 2 ? b : c;
    let cell = level.get(last) as C | undefined;
    if (cell === undefined) {
      cell = this.add([a, b, c]);
      level.set(last, cell);
    }
    return cell;
  }

  clear(): void {
    this.list.length = 0;
    this.root.clear();
    this.only = undefined;
  }

  private level(from: Map<Value, unknown>, value: Value): Map<Value, unknown> {
    let next = from.get(value) as Map<Value, unknown> | undefined;
    if (next === undefined) {
      next = new Map();
      from.set(value, next);
    }
    return next;
  }

  private add(values: readonly Value[]): C {
    const labels: Labels = {};
    this.names.forEach((name, i) => {
      labels[name] = String(values[i]);
    });
    const cell = this.make(labels);
    this.list.push(cell);
    return cell;
  }
}

interface Config {
  readonly name: string;
  readonly help: string;
  readonly labelNames?: readonly string[];
  readonly registers: readonly Registry[];
}

/** A prom-client Counter counted in cells: each collection adds what the cells counted since the last. */
export class TalliedCounter {
  private readonly cells: Cells<{ readonly labels: Labels; pending: number }>;

  constructor(config: Config) {
    const cells = new Cells(config.labelNames ?? [], (labels) => ({ labels, pending: 0 }));
    this.cells = cells;
    new Counter({
      name: config.name,
      help: config.help,
      labelNames: config.labelNames ?? [],
      registers: [...config.registers],
      collect() {
        for (const cell of cells.list) {
          if (cell.pending === 0) continue;
          this.inc(cell.labels, cell.pending);
          cell.pending = 0;
        }
      },
    });
  }

  /** Adds one to the cell of these label values. */
  inc(a: Value = "", b: Value = "", c: Value = ""): void {
    this.cells.get(a, b, c).pending++;
  }
}

interface HistogramCell {
  readonly labels: Labels;
  /** Observations per bucket (index i: at most bounds[i]; the last: above every bound). */
  readonly counts: Float64Array;
  sum: number;
  count: number;
}

/** A histogram with prom-client's exposition (its Registry renders it); the bounds as prom-client's `buckets`. */
export class TalliedHistogram {
  readonly type = "histogram";
  readonly aggregator = "sum";
  readonly name: string;
  readonly help: string;
  private readonly bounds: readonly number[];
  private readonly cells: Cells<HistogramCell>;

  constructor(config: Config & { readonly buckets: readonly number[] }) {
    this.name = config.name;
    this.help = config.help;
    this.bounds = [...config.buckets].sort((x, y) => x - y);
    this.cells = new Cells(config.labelNames ?? [], (labels) => ({
      labels,
      counts: new Float64Array(this.bounds.length + 1),
      sum: 0,
      count: 0,
    }));
    // Without labels its one series shows (as zeros) before any observation, as prom-client's does.
    if (this.cells.names.length === 0) this.cells.get("", "", "");
    for (const registry of config.registers) registry.registerMetric(this as unknown as Metric);
  }

  /** One observation in the cell of these label values; a value that is not finite throws, as prom-client's. */
  observe(value: number, a: Value = "", b: Value = "", c: Value = ""): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    const cell = this.cells.get(a, b, c);
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > (bounds[i] as number)) i++;
    (cell.counts as Float64Array)[i] = (cell.counts[i] as number) + 1;
    cell.sum += value;
    cell.count++;
  }

  reset(): void {
    this.cells.clear();
    if (this.cells.names.length === 0) this.cells.get("", "", "");
  }

  /** What prom-client's Registry renders: cumulative buckets, +Inf, sum and count per label set. */
  async getForPromString() {
    const values = [];
    for (const cell of this.cells.list) {
      let cumulative = 0;
      const bucket = `${this.name}_bucket`;
      for (const [i, bound] of this.bounds.entries()) {
        cumulative += cell.counts[i] as number;
        values.push({ labels: { le: bound }, sharedLabels: cell.labels, value: cumulative, metricName: bucket, exemplar: null });
      }
      const shared = cell.labels;
      values.push({ labels: { le: "+Inf" }, sharedLabels: shared, value: cell.count, metricName: bucket, exemplar: null });
      values.push({ labels: {}, sharedLabels: shared, value: cell.sum, metricName: `${this.name}_sum`, exemplar: undefined });
      values.push({ labels: {}, sharedLabels: shared, value: cell.count, metricName: `${this.name}_count`, exemplar: undefined });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  /** The same values with each label set spread into its labels (prom-client's `get`, for JSON). */
  async get() {
    const data = await this.getForPromString();
    const values = data.values.map(({ labels, sharedLabels, ...rest }) => ({ ...rest, labels: { ...labels, ...sharedLabels } }));
    return { ...data, values };
  }
}
