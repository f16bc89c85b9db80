#!/usr/bin/env node
/**
 * Our LaTeX reader against pandoc's LaTeX reader and LaTeXML (Debian packages `pandoc`,
 * `latexml`), issue 49 item 4: on the real-paper corpus (`../shared/papers/corpus/`, headings from
 * its EXPECTED.jsonl, read by hand) and on the test papers of `test/fixtures/tex-kinds/` (headings
 * written below, by hand, from the sources), per paper and tool:
 *
 * - headings right: the top-level section titles (main text then appendix) equal to the expected
 *   list after normalising their form (NFC, math as one token, dashes / quotes, case, spaces,
 *   a trailing period); and the share of expected titles found anywhere in the tool's headings;
 * - words kept: the share of the source's prose words (our coverage measure of the flattened,
 *   typeset source: lib/data/latex/coverage.ts, the same reference for every tool) found in the
 *   tool's output text, as multisets;
 * - seconds per paper (wall; pandoc and LaTeXML each get the paper's main file, in its folder,
 *   with a time limit of `--timeout` seconds, default 120).
 *
 *   node scripts/bench/compare_readers.mjs [--corpus DIR] [--timeout 120] [--only ours,pandoc,latexml] [--json out.json]
 *
 * Not run in CI (LaTeXML takes minutes). Needs the TypeScript build (dist/). The tools are given
 * the main file our reader chose, so a tool is not penalised for the main-file choice.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { benchArgs, root, writeJson } from './harness.mjs';

const args = benchArgs({ corpus: { type: 'string' }, timeout: { type: 'string' }, only: { type: 'string' } });
const corpus = resolve(args.corpus ?? process.env.PAPERGYM_CORPUS_DIR ?? join(root, '..', 'shared', 'papers', 'corpus'));
const timeoutS = Number(args.timeout ?? 120);
const tools = (args.only ?? 'ours,pandoc,latexml').split(',');
const dist = join(root, 'dist', 'lib', 'data', 'latex', 'index.js');
if (!existsSync(dist)) {
  console.error('compare_readers: build the TypeScript first (npx tsc -p tsconfig.json)');
  process.exit(2);
}
const L = await import(dist);
const { words, sourceProseWords } = await import(join(root, 'dist', 'lib', 'data', 'latex', 'coverage.js'));

/** Expected top-level headings of the test papers (read from their sources by hand). */
const KINDS = {
  'input-path': { sections: ['Introduction', 'Method', 'Results'], appendix_sections: ['Likelihood derivations'] },
  includeonly: { sections: ['Introduction', 'Experiments'] },
  xparse: { sections: ['Introduction', 'Method', 'Acknowledgements'] },
  'verbatim-envs': { sections: ['Introduction', 'Examples', 'Conclusion'] },
  'inline-verbatim': { sections: ['Commands', 'Advice'] },
  copernicus: {
    sections: ['Introduction', 'Model description', 'Evaluation', 'Summary and outlook', 'Code availability', 'Author contributions', 'Competing interests'],
  },
  aanda: { sections: ['Introduction', 'Observations', 'Conclusions'] },
  ieeetran: { sections: ['Introduction', 'Method', 'Acknowledgment'] },
  'small-kinds': { sections: ['Why sectioning commands matter for machine readers', 'Contributions', 'Author contributions'] },
  'unknown-class': { sections: ['Introduction', 'Data', 'Conclusions'] },
};

const norm = (t) =>
  t
    .normalize('NFC')
    .replace(/\$[^$]*\$/g, '$')
    .replace(/[‐‑‒–—―]|--+/g, '-')
    .replace(/[‘’`']/g, "'")
    .replace(/[“”]|''|``/g, '"')
    .replace(/\s+/g, ' ')
    .trim()
    .toLowerCase()
    .replace(/\.$/, '');

const tmp = mkdtempSync(join(tmpdir(), 'pg-compare-'));
const papers = [];
if (existsSync(join(corpus, 'EXPECTED.jsonl'))) {
  for (const l of readFileSync(join(corpus, 'EXPECTED.jsonl'), 'utf8')
    .split('\n')
    .filter((x) => x.trim())) {
    const e = JSON.parse(l);
    papers.push({ name: e.file, path: join(corpus, e.file), expected: [...e.sections, ...(e.appendix_sections ?? [])] });
  }
} else console.error(`compare_readers: no corpus at ${corpus}; test papers only`);
for (const [k, e] of Object.entries(KINDS))
  papers.push({ name: `tex-kinds/${k}`, path: join(root, 'test', 'fixtures', 'tex-kinds', k), expected: [...e.sections, ...(e.appendix_sections ?? [])] });

/** Multiset share of `ref` words found in `text`. */
function kept(ref, text) {
  const have = new Map();
  for (const w of words(text)) have.set(w, (have.get(w) ?? 0) + 1);
  let n = 0;
  for (const w of ref) {
    const c = have.get(w) ?? 0;
    if (c > 0) {
      n++;
      have.set(w, c - 1);
    }
  }
  return ref.length ? n / ref.length : 1;
}

function scoreHeadings(expected, got) {
  const e = expected.map(norm);
  const g = got.map(norm);
  const set = new Set(g);
  return { exact: e.length === g.length && e.every((x, k) => x === g[k]), found: e.length ? e.filter((x) => set.has(x)).length / e.length : 1 };
}

function run(cmd, argv, cwd) {
  const t0 = process.hrtime.bigint();
  const r = spawnSync(cmd, argv, { cwd, encoding: 'utf8', timeout: timeoutS * 1000, maxBuffer: 256 * 2 ** 20 });
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  return {
    r,
    s,
    error: r.error
      ? r.error.code === 'ETIMEDOUT'
        ? `time-out (${timeoutS} s)`
        : String(r.error.message)
      : r.status !== 0
        ? `exit ${r.status}: ${(r.stderr ?? '').trim().split('\n').slice(-1)[0]}`
        : undefined,
  };
}

/** Pandoc's JSON AST: headers at the outermost level present, and all Str text. */
function pandocRead(json) {
  const doc = JSON.parse(json);
  const heads = [];
  const text = [];
  const inl = (xs) => {
    const out = [];
    const walk = (x) => {
      if (Array.isArray(x)) x.forEach(walk);
      else if (x && typeof x === 'object') {
        if (x.t === 'Str') out.push(x.c);
        else if (x.t === 'Space' || x.t === 'SoftBreak' || x.t === 'LineBreak') out.push(' ');
        else if (x.t === 'Math') out.push(`$${x.c[1]}$`);
        else if (x.t === 'Code') out.push(x.c[1]);
        else if (x.c !== undefined) walk(x.c);
      }
    };
    walk(xs);
    return out.join('');
  };
  const walkBlocks = (bs) => {
    for (const b of bs ?? []) {
      if (b.t === 'Header') {
        heads.push({ level: b.c[0], title: inl(b.c[2]) });
        text.push(inl(b.c[2]));
      } else if (b.t === 'CodeBlock') text.push(b.c[1]);
      else text.push(inl(b.c));
    }
  };
  walkBlocks(doc.blocks);
  const meta = doc.meta ?? {};
  for (const k of ['title', 'abstract']) if (meta[k]) text.push(inl(meta[k].c));
  const top = Math.min(...heads.map((h) => h.level));
  return { headings: heads.filter((h) => h.level === top).map((h) => h.title), text: text.join('\n') };
}

/** LaTeXML's HTML: chapter or section titles (and appendix titles), and the text without tags. */
function latexmlRead(html) {
  const strip = (s) =>
    s
      .replace(/<span class="ltx_tag[^"]*"[^>]*>[\s\S]*?<\/span>/g, '')
      .replace(/<[^>]+>/g, ' ')
      .replace(/&amp;/g, '&')
      .replace(/&lt;/g, '<')
      .replace(/&gt;/g, '>')
      .replace(/&#[0-9]+;|&[a-z]+;/g, ' ')
      .replace(/\s+/g, ' ')
      .trim();
  const titles = (kind) =>
    [...html.matchAll(new RegExp(`<h[1-6][^>]*class="ltx_title ltx_title_${kind}"[^>]*>([\\s\\S]*?)</h[1-6]>`, 'g'))].map((m) => strip(m[1]));
  const top = titles('chapter').length ? 'chapter' : 'section';
  const body = html.replace(/<head>[\s\S]*?<\/head>/, '').replace(/<math[\s\S]*?<\/math>/g, ' $ ');
  return { headings: [...titles(top), ...titles('appendix')], text: strip(body) };
}

const rows = [];
console.log(`compare_readers: ${papers.length} papers, tools ${tools.join(', ')}, time limit ${timeoutS} s`);
for (const paper of papers) {
  const dir = join(tmp, paper.name.replace(/[^a-zA-Z0-9.-]+/g, '_'));
  // the reference: our flattened, typeset source's prose words, and the main file
  const src = await L.unpackSource(paper.path, { workDir: tmp });
  let main;
  let ref;
  try {
    const choice = L.chooseMainFile(src.root, () => {}, { paperId: L.paperIdFromPath(paper.path) });
    main = choice.main;
    ref = sourceProseWords(L.stripIffalse(L.expandMacros(choice.flat.text)));
    const row = { paper: paper.name, words: ref.length };
    for (const tool of tools) {
      let res;
      if (tool === 'ours') {
        const t0 = process.hrtime.bigint();
        try {
          const p = await L.loadPaper(paper.path, { workDir: tmp });
          const s = Number(process.hrtime.bigint() - t0) / 1e9;
          const text = [p.title, p.abstract, ...p.sections.map((x) => `${x.title}\n${x.text}`)].join('\n');
          res = { s, headings: p.sections.filter((x) => x.level !== 'front').map((x) => x.title), text };
        } catch (e) {
          res = { s: Number(process.hrtime.bigint() - t0) / 1e9, error: e.message.slice(0, 120) };
        }
      } else if (tool === 'pandoc') {
        const x = run('pandoc', ['-f', 'latex', '-t', 'json', main.split('/').pop()], join(src.root, dirname(main)));
        res = x.error ? { s: x.s, error: x.error } : { s: x.s, ...pandocRead(x.r.stdout) };
      } else {
        const out = join(dir, 'out.html');
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir, { recursive: true });
        const x = run(
          'latexmlc',
          // the log goes to the scratch folder: a directory paper is read in place and must stay as it is
          ['--quiet', '--nocomments', `--timeout=${timeoutS}`, '--format=html5', `--dest=${out}`, `--log=${join(dir, 'latexml.log')}`, main.split('/').pop()],
          join(src.root, dirname(main)),
        );
        // latexmlc's own --timeout ends it with a stub page and exit 0: a run that took the whole limit is a time-out
        const timedOut = x.s >= timeoutS;
        res =
          existsSync(out) && !timedOut
            ? { s: x.s, ...latexmlRead(readFileSync(out, 'utf8')), ...(x.error && { warning: x.error }) }
            : { s: x.s, error: timedOut ? `time-out (${timeoutS} s)` : (x.error ?? 'no output') };
      }
      const h = res.headings ? scoreHeadings(paper.expected, res.headings) : { exact: false, found: 0 };
      row[tool] = {
        seconds: Number(res.s.toFixed(2)),
        headingsExact: h.exact,
        headingsFound: Number(h.found.toFixed(3)),
        wordsKept: res.text !== undefined ? Number(kept(ref, res.text).toFixed(4)) : 0,
        ...(res.error && { error: res.error }),
      };
    }
    rows.push(row);
    console.log(
      `${paper.name.padEnd(42)} ${tools.map((t) => `${t}: ${row[t].headingsExact ? 'H✓' : 'H✗'} ${(100 * row[t].headingsFound).toFixed(0).padStart(3)}% heads, ${(100 * row[t].wordsKept).toFixed(1).padStart(5)}% words, ${row[t].seconds.toFixed(1).padStart(6)} s${row[t].error ? ` (${row[t].error})` : ''}`).join(' | ')}`,
    );
  } finally {
    src.cleanup();
  }
}
const sum = (t, group) => {
  const rs = rows.filter((r) => (group === 'corpus' ? !r.paper.startsWith('tex-kinds/') : r.paper.startsWith('tex-kinds/')));
  if (!rs.length) return undefined;
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  return {
    papers: rs.length,
    headingsExact: rs.filter((r) => r[t].headingsExact).length,
    headingsFound: Number((rs.reduce((a, r) => a + r[t].headingsFound, 0) / rs.length).toFixed(3)),
    wordsKept: Number(med(rs.map((r) => r[t].wordsKept)).toFixed(4)),
    secondsMedian: Number(med(rs.map((r) => r[t].seconds)).toFixed(2)),
    failed: rs.filter((r) => r[t].error).length,
  };
};
const summary = {};
for (const g of ['corpus', 'tex-kinds']) for (const t of tools) summary[`${g}/${t}`] = sum(t, g);
for (const [k, v] of Object.entries(summary))
  if (v)
    console.log(
      `${k.padEnd(20)} headings exact ${v.headingsExact}/${v.papers}, found ${(100 * v.headingsFound).toFixed(1)}%, words kept (median) ${(100 * v.wordsKept).toFixed(1)}%, ${v.secondsMedian} s per paper (median), ${v.failed} failed`,
    );
writeJson(args.json, { corpus, timeoutS, rows, summary });
rmSync(tmp, { recursive: true, force: true });
