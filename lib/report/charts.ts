/**
 * Chart rendering for the run report: Apache ECharts' server-side SVG renderer
 * (`echarts.init(null, null, { renderer: 'svg', ssr: true })` + `renderToSVGString()`) and
 * resvg (`@resvg/resvg-js`) for PNG. This module only builds ECharts options from series data;
 * all drawing is done by the two libraries.
 */
import * as echarts from 'echarts';
import { Resvg } from '@resvg/resvg-js';

/** One line: points [x, y] and, optionally, a band [x, lo, hi] drawn as a shaded area. */
export interface LineSeries {
  name: string;
  /** y = null leaves a gap. */
  points: [number, number | null][];
  band?: [number, number, number][];
  /** Marked points (e.g. the early-stop point), with a label. */
  marks?: { x: number; y: number; label: string }[];
  /** Draw symbols at every point (sparse series such as validation). */
  symbols?: boolean;
}

/** A vertical marker line (stage boundary, early stop). */
export interface VLine {
  x: number;
  label: string;
}

export interface LineChartSpec {
  title: string;
  xName: string;
  yName: string;
  series: LineSeries[];
  vlines?: VLine[];
  /** y axis on a log scale (only when every value is > 0). */
  logY?: boolean;
}

/** Grouped bars with an interval per bar (e.g. coverage with its bootstrap CI). */
export interface BarChartSpec {
  title: string;
  yName: string;
  categories: string[];
  groups: { name: string; values: { mean: number; lo: number; hi: number }[] }[];
  /** y range (default: from the data). */
  yMin?: number;
  yMax?: number;
}

export const CHART_WIDTH = 640;
export const CHART_HEIGHT = 340;

// Okabe–Ito colours (distinguishable with colour-vision deficiency), then ECharts' palette.
const PALETTE = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#F0E442', '#000000', '#5470c6', '#91cc75', '#fac858', '#ee6666'];

const base = (title: string) => ({
  animation: false,
  backgroundColor: '#ffffff',
  color: PALETTE,
  textStyle: { fontFamily: 'DejaVu Sans, Liberation Sans, Arial, sans-serif' },
  title: { text: title, left: 'center', top: 6, textStyle: { fontSize: 14, fontWeight: 'bold' } },
});

function lineOption(s: LineChartSpec): Record<string, unknown> {
  const series: Record<string, unknown>[] = [];
  s.series.forEach((l, i) => {
    const color = PALETTE[i % PALETTE.length];
    const main: Record<string, unknown> = {
      type: 'line',
      name: l.name,
      data: l.points.map(([x, y]) => [x, y === null ? '-' : y]),
      showSymbol: l.symbols ?? l.points.length <= 1,
      symbolSize: 6,
      lineStyle: { width: 1.8 },
      itemStyle: { color },
      connectNulls: false,
      z: 3,
    };
    if (l.marks?.length) {
      main.markPoint = {
        symbol: 'pin',
        symbolSize: 42,
        itemStyle: { color },
        label: { fontSize: 9 },
        data: l.marks.map((m) => ({ coord: [m.x, m.y], value: m.label, name: m.label })),
      };
    }
    series.push(main);
    if (l.band?.length) {
      const stack = `band-${i}`;
      series.push({
        type: 'line',
        name: `${l.name} band`,
        data: l.band.map(([x, lo]) => [x, lo]),
        stack,
        lineStyle: { opacity: 0 },
        showSymbol: false,
        silent: true,
        z: 1,
      });
      series.push({
        type: 'line',
        name: `${l.name} band`,
        data: l.band.map(([x, lo, hi]) => [x, hi - lo]),
        stack,
        lineStyle: { opacity: 0 },
        areaStyle: { color, opacity: 0.18 },
        showSymbol: false,
        silent: true,
        z: 1,
      });
    }
  });
  if (s.vlines?.length && series.length) {
    series[0]!.markLine = {
      symbol: 'none',
      silent: true,
      lineStyle: { type: 'dashed', color: '#666', width: 1 },
      label: { position: 'insideEndTop', fontSize: 10, color: '#444', formatter: '{b}' },
      data: s.vlines.map((v) => ({ xAxis: v.x, name: v.label })),
    };
  }
  return {
    ...base(s.title),
    legend: { top: 28, data: s.series.map((l) => l.name), type: 'plain', textStyle: { fontSize: 11 } },
    grid: { left: 72, right: 24, top: s.series.length > 3 ? 84 : 60, bottom: 44 },
    xAxis: { type: 'value', name: s.xName, nameLocation: 'middle', nameGap: 26, minInterval: 1, scale: true },
    yAxis: { type: s.logY ? 'log' : 'value', name: s.yName, nameLocation: 'middle', nameGap: 46, nameRotate: 90, scale: !s.logY },
    series,
  };
}

function barOption(s: BarChartSpec): Record<string, unknown> {
  const n = s.groups.length;
  const series: Record<string, unknown>[] = s.groups.map((g, gi) => ({
    type: 'bar',
    name: g.name,
    data: g.values.map((v) => v.mean),
    itemStyle: { color: PALETTE[gi % PALETTE.length] },
    barMaxWidth: 48,
  }));
  // Error bars: a custom series drawing each interval at its bar's position (ECharts' documented
  // way to draw error bars: renderItem with api.coord/api.size).
  s.groups.forEach((g, gi) => {
    series.push({
      type: 'custom',
      name: g.name,
      data: g.values.map((v, ci) => [ci, v.lo, v.hi]),
      // Both ends of the interval count for the y-axis extent.
      encode: { x: 0, y: [1, 2] },
      z: 10,
      silent: true,
      renderItem: (
        _params: unknown,
        api: {
          value: (i: number) => number;
          coord: (p: [number, number]) => [number, number];
          size: (p: [number, number]) => [number, number];
          style: (o: object) => object;
        },
      ) => {
        const ci = api.value(0);
        const lo = api.coord([ci, api.value(1)]);
        const hi = api.coord([ci, api.value(2)]);
        const band = api.size([1, 0])[0];
        const slot = (band * 0.8) / n;
        const x = lo[0] - (band * 0.8) / 2 + slot * (gi + 0.5);
        const w = Math.min(10, slot * 0.3);
        const style = { stroke: '#222', lineWidth: 1.4, fill: 'none' };
        return {
          type: 'group',
          children: [
            { type: 'line', shape: { x1: x, y1: lo[1], x2: x, y2: hi[1] }, style },
            { type: 'line', shape: { x1: x - w, y1: lo[1], x2: x + w, y2: lo[1] }, style },
            { type: 'line', shape: { x1: x - w, y1: hi[1], x2: x + w, y2: hi[1] }, style },
          ],
        };
      },
    });
  });
  return {
    ...base(s.title),
    legend: { top: 28, data: s.groups.map((g) => g.name), textStyle: { fontSize: 11 } },
    grid: { left: 72, right: 24, top: 60, bottom: 44 },
    xAxis: { type: 'category', data: s.categories, axisLabel: { fontSize: 11, interval: 0 } },
    yAxis: { type: 'value', name: s.yName, nameLocation: 'middle', nameGap: 46, nameRotate: 90, min: s.yMin, max: s.yMax },
    series,
  };
}

function render(option: Record<string, unknown>, width: number, height: number): string {
  const chart = echarts.init(null, null, { renderer: 'svg', ssr: true, width, height });
  try {
    chart.setOption(option);
    return chart.renderToSVGString();
  } finally {
    chart.dispose();
  }
}

/** Renders a line chart to an SVG document string (ECharts SSR). */
export function lineChartSvg(s: LineChartSpec, width = CHART_WIDTH, height = CHART_HEIGHT): string {
  return render(lineOption(s), width, height);
}

/** Renders a grouped bar chart with interval whiskers to an SVG document string (ECharts SSR). */
export function barChartSvg(s: BarChartSpec, width = CHART_WIDTH, height = CHART_HEIGHT): string {
  return render(barOption(s), width, height);
}

/** Rasterises an SVG document to PNG bytes with resvg at `scale`× (system fonts). */
export function svgToPng(svg: string, scale = 2): Buffer {
  const r = new Resvg(svg, { fitTo: { mode: 'zoom', value: scale }, font: { loadSystemFonts: true }, background: '#ffffff' });
  return Buffer.from(r.render().asPng());
}
