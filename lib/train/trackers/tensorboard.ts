/**
 * TensorBoard tracker: writes an event file `<run>/tensorboard/events.out.tfevents.<unix s>.<host>.<pid>.0`
 * that `tensorboard --logdir <run>/tensorboard` (and its EventAccumulator) reads.
 *
 * Format (format code, written here because no maintained npm writer exists): TFRecord framing —
 * uint64 LE length, uint32 LE masked CRC-32C of the length bytes, the record, uint32 LE masked CRC-32C
 * of the record (tensorflow/core/lib/io/record_writer.cc; mask: ((crc >>> 15) | (crc << 17)) +
 * 0xa282ead8) — around `tensorflow.Event` protobufs (tensorflow/core/util/event.proto): the first
 * event carries `file_version: "brain.Event:2"`; each metrics row is one event with `summary.value`
 * entries `{tag, simple_value}` (summary.proto); the resolved config is one text-plugin summary
 * (tag `config`, a DT_STRING TensorProto holding Markdown, plugin_name "text").
 * Appended synchronously per row, so a crash loses nothing already logged. TensorBoard has no
 * artifacts: the artifact paths are logged as text (tag `artifacts`).
 */
import { appendFileSync, mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Tracker, TrackerKind, TrackerStart } from './index.js';

// ---- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) ----
const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[i] = c >>> 0;
  }
  return t;
})();

/** CRC-32C of `b` (check value of "123456789": 0xe3069283). */
export function crc32c(b: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < b.length; i++) c = CRC_TABLE[(c ^ b[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** TFRecord's masked CRC. */
export function maskedCrc(b: Uint8Array): number {
  const c = crc32c(b);
  return ((((c >>> 15) | (c << 17)) >>> 0) + 0xa282ead8) >>> 0;
}

/** One TFRecord: length, masked CRC of the length, data, masked CRC of the data. */
export function tfRecord(data: Uint8Array): Buffer {
  const head = Buffer.alloc(12);
  head.writeBigUInt64LE(BigInt(data.length), 0);
  head.writeUInt32LE(maskedCrc(head.subarray(0, 8)), 8);
  const tail = Buffer.alloc(4);
  tail.writeUInt32LE(maskedCrc(data), 0);
  return Buffer.concat([head, data, tail]);
}

// ---- protobuf wire format (developers.google.com/protocol-buffers/docs/encoding) ----
function varint(n: number | bigint): Buffer {
  let v = BigInt(n);
  if (v < 0n) v += 1n << 64n; // int64 negatives: two's complement, 10 bytes
  const out: number[] = [];
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return Buffer.from(out);
}
const key = (field: number, wire: number) => varint((field << 3) | wire);
const bytesField = (field: number, b: Uint8Array | string) => {
  const buf = typeof b === 'string' ? Buffer.from(b, 'utf8') : Buffer.from(b);
  return Buffer.concat([key(field, 2), varint(buf.length), buf]);
};
const doubleField = (field: number, x: number) => {
  const b = Buffer.alloc(8);
  b.writeDoubleLE(x);
  return Buffer.concat([key(field, 1), b]);
};
const floatField = (field: number, x: number) => {
  const b = Buffer.alloc(4);
  b.writeFloatLE(x);
  return Buffer.concat([key(field, 5), b]);
};
const varintField = (field: number, n: number | bigint) => Buffer.concat([key(field, 0), varint(n)]);

/** Event{wall_time (1, double seconds), step (2, int64), file_version (3) | summary (5)}. */
export function eventProto(wallTimeS: number, step: number, body: { fileVersion: string } | { summaryValues: Buffer[] }): Buffer {
  const parts = [doubleField(1, wallTimeS), varintField(2, step)];
  if ('fileVersion' in body) parts.push(bytesField(3, body.fileVersion));
  else parts.push(bytesField(5, Buffer.concat(body.summaryValues.map((v) => bytesField(1, v)))));
  return Buffer.concat(parts);
}

/** Summary.Value{tag (1), simple_value (2, float)}. */
export function scalarValue(tag: string, x: number): Buffer {
  return Buffer.concat([bytesField(1, tag), floatField(2, x)]);
}

/** Summary.Value{tag, metadata (9){plugin_data (1){plugin_name "text"}}, tensor (8){dtype DT_STRING=7, tensor_shape {}, string_val}}. */
export function textValue(tag: string, text: string): Buffer {
  const metadata = bytesField(1, bytesField(1, 'text'));
  const tensor = Buffer.concat([varintField(1, 7), bytesField(2, Buffer.alloc(0)), bytesField(8, text)]);
  return Buffer.concat([bytesField(1, tag), bytesField(9, metadata), bytesField(8, tensor)]);
}

/** The event file writer (one file per process; TensorBoard reads every file of the dir). */
export class EventFileWriter {
  readonly path: string;
  constructor(dir: string) {
    mkdirSync(dir, { recursive: true });
    this.path = join(dir, `events.out.tfevents.${Math.floor(Date.now() / 1000)}.${hostname()}.${process.pid}.0`);
    appendFileSync(this.path, tfRecord(eventProto(Date.now() / 1000, 0, { fileVersion: 'brain.Event:2' })));
  }
  scalars(step: number, values: Record<string, number>, wallTimeMs = Date.now()): void {
    const vals = Object.entries(values).map(([k, v]) => scalarValue(k, v));
    if (vals.length) appendFileSync(this.path, tfRecord(eventProto(wallTimeMs / 1000, step, { summaryValues: vals })));
  }
  text(step: number, tag: string, markdown: string): void {
    appendFileSync(this.path, tfRecord(eventProto(Date.now() / 1000, step, { summaryValues: [textValue(tag, markdown)] })));
  }
}

/** The event files' dir under the run dir. */
const TENSORBOARD_DIR = 'tensorboard';

export async function openTensorboard(s: TrackerStart): Promise<Tracker> {
  const w = new EventFileWriter(join(s.runDir, TENSORBOARD_DIR));
  const rows = Object.entries(s.params).map(([k, v]) => `| ${k} | ${String(v).replace(/\|/g, '\\|')} |`);
  w.text(0, 'config', ['| key | value |', '| --- | --- |', ...rows].join('\n'));
  let last = 0;
  return {
    name: 'tensorboard',
    logMetrics(step, scalars, wallTimeMs) {
      last = step;
      w.scalars(step, scalars, wallTimeMs);
    },
    logArtifacts(paths) {
      w.text(last, 'artifacts', paths.map((p) => `- ${p}`).join('\n'));
    },
    finish() {},
  };
}

/** The `--report-to tensorboard` descriptor (./index.ts registers it). */
export const tensorboardTracker: TrackerKind = {
  name: 'tensorboard',
  describe: 'TensorBoard event file under <out>/tensorboard/ (TFRecord framing, tf.Event protos)',
  runDirEntries: [TENSORBOARD_DIR],
  open: (s) => openTensorboard(s),
};
