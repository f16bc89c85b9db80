/**
 * Worker thread for {@link latexToTextBatch}: parses LaTeX with @unified-latex and posts the
 * plain text back; the parent terminates it when a parse exceeds the time limit.
 */
import { parentPort } from 'node:worker_threads';
import { parseToText } from './text.js';

parentPort?.on('message', (m: { src: string }) => {
  try {
    parentPort!.postMessage({ ok: true, text: parseToText(m.src) });
  } catch (e) {
    parentPort!.postMessage({ ok: false, error: String((e as Error)?.message ?? e) });
  }
});
