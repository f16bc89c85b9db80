/**
 * Small LaTeX paper directories for fast data-pipeline tests (a directory source is parsed in
 * milliseconds; the fixture archives take seconds each on a loaded machine). The fake LLM's map
 * answer (test/helpers/fake-llm.ts) files an Introduction's sentences under goals / background and
 * an Experiments section's under experimental design, so every paper yields a full item.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Write `<root>/<id>/main.tex`; `id` decides the domain as for any source (`cs-…` → computer
 * science, `physics-…`, `econ-…`). `topic` makes the text (and so every LLM request) unique.
 * @returns the paper directory
 */
export function writeTinyPaper(root: string, id: string, topic = id): string {
  const dir = join(root, id);
  mkdirSync(dir, { recursive: true });
  const s = (t: string) => `${t} ${topic.replace(/[^a-z0-9 ]/gi, ' ')}.`;
  const tex = [
    '\\documentclass{article}',
    `\\title{A study of ${topic.replace(/[^a-z0-9 ]/gi, ' ')}}`,
    '\\begin{document}',
    '\\maketitle',
    '\\section{Introduction}',
    `${s('We aim to understand how robust estimators behave under heavy tails in')} ${s('Prior work on shrinkage estimators motivates the question for')}`,
    `${s('Our goal is a method that remains accurate with few samples for')} ${s('Earlier surveys of resampling methods frame the background of')}`,
    '\\section{Method}',
    `${s('We propose a weighted median estimator with adaptive bandwidth for')} ${s('The estimator combines bootstrap resampling with a robust loss in')}`,
    `${s('A regularised variant trades bias for variance when modelling')} ${s('The algorithm runs in linear time using a streaming sketch of')}`,
    '\\section{Experiments}',
    `${s('We compare against the sample mean and the trimmed mean on data about')} ${s('Ablations remove the adaptive bandwidth and the robust loss for')}`,
    `${s('Evaluation uses mean squared error over many simulated datasets of')} ${s('Robustness is checked by varying the contamination level in')}`,
    '\\end{document}',
    '',
  ].join('\n\n');
  writeFileSync(join(dir, 'main.tex'), tex);
  return dir;
}
