// Numbers of the node page's charts as people read them: legend values with their full
// unit, axis ticks short (the unit is in the chart's title). Ticks share one scale and
// as many decimals as their spacing needs, so that close values (a GPU's memory near
// 100 GiB) read 99.5, 100.0, 100.5 rather than "100Gi" on every line.

const SI = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
const BINARY_FROM_MIB = [[1024 * 1024, "Ti"], [1024, "Gi"]];

function trim(value) {
  const digits = Math.abs(value) >= 10 || Number.isInteger(value) ? 0 : 1;
  return value.toFixed(digits);
}

// Legend values: the full unit ("38.2 GB/s", "61.5 GiB", "71 °C").
export function formatValue(value, unit) {
  if (value === null || value === undefined) return "–";
  if (unit === "B/s") {
    for (const [size, prefix] of SI) if (Math.abs(value) >= size) return `${trim(value / size)} ${prefix}B/s`;
    return `${trim(value)} B/s`;
  }
  if (unit === "MiB") {
    for (const [size, prefix] of BINARY_FROM_MIB) {
      if (Math.abs(value) >= size) return `${trim(value / size)} ${prefix}B`;
    }
  }
  return `${trim(value)} ${unit}`;
}

// The scale of a set of ticks: [divisor, suffix], from the largest of them.
function tickScale(ticks, unit) {
  const top = Math.max(0, ...ticks.map((v) => Math.abs(v)));
  const steps = unit === "B/s" ? SI : unit === "MiB" ? BINARY_FROM_MIB : [];
  for (const [size, suffix] of steps) if (top >= size) return [size, suffix];
  return [1, ""];
}

// Axis ticks: one scale for all, and the fewest decimals (at most 3) that write every
// tick exactly, so that neighbours never read the same.
export function tickLabels(ticks, unit) {
  if (!ticks.length) return [];
  const [size, suffix] = tickScale(ticks, unit);
  const scaled = ticks.map((v) => v / size);
  let digits = 0;
  const exact = (d) => scaled.every((v) => Math.abs(v * 10 ** d - Math.round(v * 10 ** d)) < 1e-6 * 10 ** d);
  while (digits < 3 && !exact(digits)) digits += 1;
  return scaled.map((v) => `${v.toFixed(digits)}${suffix}`);
}

// The y range: percentages 0-100; memory from zero (how full it is is the point);
// anything else as uPlot fits it.
export function yScale(unit) {
  if (unit === "%") return { range: [0, 100] };
  if (unit === "MiB") return { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] };
  return { auto: true };
}

// The steps between ticks: for memory (MiB) whole binary units (512 MiB, 1, 2, 5, 10...
// GiB), so that ticks read 50Gi, 100Gi rather than 48.828Gi; elsewhere uPlot's own.
const MIB_STEPS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
  .concat([1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000].map((g) => g * 1024));

export function tickSteps(unit) {
  return unit === "MiB" ? MIB_STEPS : undefined;
}
