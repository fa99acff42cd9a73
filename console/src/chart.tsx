/**
 * A uPlot line chart: one series per model over UTC days, sized to its container (redrawn on resize),
 * destroyed when it leaves the page. The canvas carries no text for screen readers, so the chart is an
 * image with a label and the caller shows the same numbers as a table.
 */
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

/** Distinct colours with at least 3:1 contrast on white. */
const COLOURS = ["#1f5fbf", "#b3261e", "#1e7a34", "#8a4baf", "#a15c00", "#00707a", "#5c5c5c", "#c2185b"];

export interface ChartSeries {
  label: string;
  values: number[];
}

export function LineChart(props: { label: string; days: number[]; series: ChartSeries[]; format: (v: number) => string }) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = box.current;
    if (el === null) return;
    const width = () => Math.max(280, el.clientWidth);
    const plot = new uPlot(
      {
        width: width(),
        height: 260,
        series: [
          {},
          ...props.series.map((s, i) => ({
            label: s.label,
            stroke: COLOURS[i % COLOURS.length],
            width: 2,
            value: (_u: uPlot, v: number | null) => (v === null ? "—" : props.format(v)),
          })),
        ],
        axes: [
          {},
          {
            values: (_u: uPlot, ticks: number[]) => ticks.map(props.format),
            // Wide enough for the longest label (about 7.5 px a character at the axis font) and the ticks.
            size: (_u: uPlot, values: string[] | null) => 24 + 7.5 * Math.max(4, ...(values ?? []).map((v) => v.length)),
          },
        ],
        scales: { x: { time: true } },
      },
      [props.days, ...props.series.map((s) => s.values)],
      el,
    );
    const resize = () => plot.setSize({ width: width(), height: 260 });
    addEventListener("resize", resize);
    return () => {
      removeEventListener("resize", resize);
      plot.destroy();
    };
  }, [props.days, props.series, props.format]);
  return <div class="chart" ref={box} role="img" aria-label={props.label} />;
}
