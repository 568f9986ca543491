// What the node page's and the job page's uPlot charts share: the theme's colours and
// axes, and one series per line with its values in the chart's unit.
import { formatValue, tickLabels, tickSteps } from "./units.js";

export function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

export function palette() {
  return [1, 2, 3, 4, 5, 6, 7, 8].map((i) => cssVar(`--series-${i}`));
}

// The x axis and the y axis (ticks in the chart's unit); `extra` goes on the y axis.
export function axes(unit, extra = {}) {
  const axis = { stroke: cssVar("--muted"), grid: { stroke: cssVar("--grid") }, ticks: { stroke: cssVar("--grid") } };
  return [axis, { ...axis, incrs: tickSteps(unit), values: (u, ticks) => tickLabels(ticks, unit), ...extra }];
}

// uPlot's series: the time, then each line with its colour; gaps stay gaps.
export function lineSeries(data) {
  const colors = palette();
  return [
    { label: "Time", value: "{YYYY}-{MM}-{DD} {HH}:{mm}" },
    ...data.series.map((s, i) => ({
      label: s.label,
      stroke: colors[i % colors.length],
      width: 1.5,
      points: { show: false },
      spanGaps: false,
      value: (u, v) => formatValue(v, data.unit),
    })),
  ];
}
