/**
 * Ingestion reads what TeX would typeset (issue 33), one test per kind, each on a minimal source
 * written here: conditionals of every form, `\endinput`, subfiles, import / subimport /
 * includefrom, includes reached through user macros, a `\documentclass` that arrives through an
 * `\input`, arXiv's 00README directives and `%auto-ignore`, title macros, the coverage check, and
 * bad input (cycles, unclosed conditionals, a 00README naming a missing file, runaway macros, an
 * `\input` fan-out bounded by the expansion limits of issue 38).
 */
import { expect } from 'chai';
import { tarOf } from './helpers/tar.js';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { buildDataset, type JsonLlm } from '../lib/data/pipeline.js';
import { PipelineState } from '../lib/data/state.js';
import {
  cleanTitle,
  CoverageError,
  ExpansionLimitError,
  findTitle,
  formatWarning,
  loadPaper,
  measureCoverage,
  stripIffalse,
  type Paper,
} from '../lib/data/latex/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const CLI = join(here, '..', '..', 'dist', 'bin', 'papergym-native.js');

const titles = (p: Paper) => p.sections.filter((s) => s.level !== 'front').map((s) => s.title);
const allText = (p: Paper) => [p.abstract, ...p.sections.map((s) => s.text)].join('\n');
const doc = (...body: string[]) => ['\\documentclass{article}', '\\begin{document}', ...body, '\\end{document}', ''].join('\n');
const prose = (n: number, w = 'lorem') =>
  Array.from({ length: n }, (_, k) => `${w}${String.fromCharCode(97 + (k % 26))}${String.fromCharCode(97 + ((k / 26) % 26))}`).join(' ');

describe('data: ingestion reads what TeX would typeset', function () {
  this.timeout(60000);
  let work: string;
  beforeEach(() => {
    work = mkdtempSync(join(tmpdir(), 'pg-tex-'));
  });
  afterEach(() => rmSync(work, { recursive: true, force: true }));
  const dir = (name: string, files: Record<string, string>) => {
    const d = join(work, name);
    for (const [f, body] of Object.entries(files)) {
      mkdirSync(dirname(join(d, f)), { recursive: true });
      writeFileSync(join(d, f), body);
    }
    return d;
  };
  const load = (p: string, o: Parameters<typeof loadPaper>[1] = {}) => loadPaper(p, { workDir: join(work, 'wd'), inProcess: true, ...o });

  it('conditionals: \\iffalse / \\iftrue / \\if 0 / \\if00, \\newif switches set in preamble and body, \\else, nesting; \\ifthenelse / \\iftoggle are macros', async () => {
    const d = dir('cond', {
      'main.tex': [
        '\\documentclass{article}',
        '\\usepackage{etoolbox,ifthen}',
        '\\newif\\ifdraft \\drafttrue',
        '\\newif\\iflong',
        '\\newtoggle{extended}\\toggletrue{extended}',
        '\\begin{document}',
        '\\section{Intro} Intro text.',
        '\\iffalse \\section{Hidden A} \\ifthenelse{\\equal{a}{b}}{x}{y} \\iftoggle{other}{p}{q} \\ifdefempty{\\foo}{a}{b} \\ifcsdef{x}{a}{b} hiddenA \\fi',
        '\\section{Kept After Iffalse} kept text.',
        '\\if 0 \\section{Hidden B} hiddenB \\fi',
        '\\if0',
        '\\section{Hidden C} hiddenC',
        '\\fi',
        '\\if00 \\section{Shown D} shownD \\fi',
        '\\iftrue \\section{Shown E} \\else \\section{Hidden F} hiddenF \\fi',
        '\\ifdraft \\section{Draft Notes} draft text \\else \\section{Final Hidden} \\fi',
        '\\draftfalse',
        '\\ifdraft \\section{Hidden G} hiddenG \\else \\section{Shown H} \\fi',
        '\\iflong \\section{Hidden Long} hiddenLong \\fi',
        '\\iftoggle{extended}{\\section{Extended}}{\\section{Short Hidden}}',
        '\\iffalse outer \\iftrue innerT \\else innerE \\fi stillHidden \\else \\section{Else Branch} \\fi',
        '\\ifnum1>2 \\section{Hidden Num} \\else \\section{Num Else} \\fi',
        '\\ifdefined\\foo \\section{Opaque} opaque text \\fi',
        '\\newcommand{\\hide}[1]{\\iffalse #1\\fi}\\newcommand{\\beginhide}{\\iffalse}\\newcommand{\\endhide}{\\fi}',
        'Shown text. \\hide{hiddenByMacro} \\beginhide hiddenBetween \\endhide after macros.',
        '\\end{document}',
      ].join('\n'),
    });
    const p = await load(d);
    expect(titles(p)).to.deep.equal([
      'Intro',
      'Kept After Iffalse',
      'Shown D',
      'Shown E',
      'Draft Notes',
      'Shown H',
      'Extended',
      'Else Branch',
      'Num Else',
      'Opaque',
    ]);
    expect(allText(p)).not.to.match(/hidden[A-Z]|innerT|innerE|stillHidden/);
    expect(allText(p)).to.include('kept text').and.include('draft text').and.include('opaque text').and.include('after macros');
    expect(allText(p)).not.to.match(/hiddenByMacro|hiddenBetween/);
    expect(p.warnings.filter((w) => w.code === 'conditional-unclosed')).to.deep.equal([]);
    // the string-level entry point keeps its contract
    expect(stripIffalse('a \\iffalse x \\ifx y \\fi z \\fi b')).to.equal('a  b');
    expect(stripIffalse('a \\iffalse x \\else y \\fi b')).to.equal('a  y  b');
    expect(stripIffalse('a \\iffalse \\iftoggle{t}{x}{y} \\fi b')).to.equal('a  b');
  });

  it('\\endinput ends its own file after its line; the including file goes on', async () => {
    const d = dir('endinput', {
      'main.tex': doc('\\input{sec}', '\\section{After} after text.'),
      'sec.tex': '\\section{Kept} kept line. \\endinput same-line text\n\\section{Dropped} draft notes\n',
    });
    const p = await load(d);
    expect(titles(p)).to.deep.equal(['Kept', 'After']);
    expect(allText(p)).to.include('same-line text').and.include('after text').and.not.include('draft notes');
  });

  it('subfiles: each subfile spliced without its own wrapper; a subfile compiled alone is still readable', async () => {
    const sub = (t: string) =>
      ['\\documentclass[../main.tex]{subfiles}', '\\begin{document}', `\\section{${t}}`, `${t} text.`, '\\end{document}', ''].join('\n');
    const d = dir('subfiles', {
      'main.tex': [
        '\\documentclass{article}',
        '\\usepackage{subfiles}',
        '\\title{Split Paper}',
        '\\begin{document}',
        '\\subfile{sections/alpha}',
        '\\subfile{sections/beta}',
        '\\appendix',
        '\\subfile{sections/gamma}',
        '\\end{document}',
      ].join('\n'),
      'sections/alpha.tex': sub('Alpha'),
      'sections/beta.tex': sub('Beta'),
      'sections/gamma.tex': sub('Gamma'),
    });
    const p = await load(d);
    expect(p.mainFile).to.equal('main.tex');
    expect(titles(p)).to.deep.equal(['Alpha', 'Beta', 'Gamma']);
    expect(p.sections.find((s) => s.title === 'Gamma')?.appendix).to.equal(true);
    const alone = await load(dir('alone', { 'alpha.tex': sub('Alpha') }));
    expect(titles(alone)).to.deep.equal(['Alpha']);
    expect(allText(alone)).to.include('Alpha text');
  });

  it("\\import / \\subimport / \\includefrom: the imported file's relative inputs resolve from its own directory; nothing outside the paper", async () => {
    const d = dir('import', {
      'paper/main.tex': doc('\\import{chapters/}{one}', '\\includefrom{appx/}{extra}', '\\import{../outside/}{secret}'),
      'paper/chapters/one.tex': '\\section{One}\n\\input{part}\n\\subimport{deep/}{two}\n',
      'paper/chapters/part.tex': 'right part text.',
      'paper/chapters/deep/two.tex': '\\section{Two}\n\\input{leaf}\n',
      'paper/chapters/deep/leaf.tex': 'deep leaf text.',
      'paper/appx/extra.tex': '\\section{Extra}\n\\input{note}\n',
      'paper/appx/note.tex': 'appendix note text.',
      'paper/part.tex': '\\section{Wrong Root Part} wrong root text.',
      'paper/note.tex': 'wrong note text.',
      'paper/leaf.tex': 'wrong leaf text.',
      'outside/secret.tex': 'OUTSIDE SECRET',
    });
    const p = await load(join(d, 'paper'));
    expect(titles(p)).to.deep.equal(['One', 'Two', 'Extra']);
    const t = allText(p);
    expect(t).to.include('right part text').and.include('deep leaf text').and.include('appendix note text');
    expect(t).not.to.match(/wrong|OUTSIDE/);
    expect(p.warnings.map(formatWarning).join('\n')).to.match(
      /main\.tex:5: include "\.\.\/outside\/\/secret" points outside the paper root|outside the paper root/,
    );
  });

  it('\\input / \\include reached through user macros with arguments are followed', async () => {
    const d = dir('macro-input', {
      'main.tex': [
        '\\documentclass{article}',
        '\\newcommand{\\sect}[1]{\\input{sections/#1}}',
        '\\newcommand\\appendixfile{\\include{appendix}}',
        '\\def\\chapterfile#1{\\input{sections/#1}}',
        '\\begin{document}',
        '\\sect{intro}',
        '\\sect{method}',
        '\\chapterfile{results}',
        '\\appendix',
        '\\appendixfile',
        '\\end{document}',
      ].join('\n'),
      'sections/intro.tex': '\\section{Introduction} intro text.',
      'sections/method.tex': '\\section{Method} method text.',
      'sections/results.tex': '\\section{Results} results text.',
      'appendix.tex': '\\section{Proofs} proof text.',
    });
    const p = await load(d);
    expect(titles(p)).to.deep.equal(['Introduction', 'Method', 'Results', 'Proofs']);
    expect(p.warnings.map((w) => w.code)).not.to.include('no-article-root');
  });

  it("a \\documentclass that arrives through an \\input'd preamble: the including file is the paper", async () => {
    const d = dir('via-input', {
      'main.tex': ['\\input{preamble}', '\\section{Introduction}', 'Intro text.', '\\section{Method}', 'Method text.', '\\end{document}'].join('\n'),
      'preamble.tex': ['\\documentclass{article}', '\\title{Preamble Elsewhere}', '\\begin{document}', '\\maketitle'].join('\n'),
    });
    const p = await load(d);
    expect(p.mainFile).to.equal('main.tex');
    expect(p.title).to.equal('Preamble Elsewhere');
    expect(titles(p)).to.deep.equal(['Introduction', 'Method']);
  });

  it('arXiv directives before any heuristic: 00README.XXX toplevelfile / ignore, 00README.json / .yaml, %auto-ignore; the rule is reported', async () => {
    const files = {
      'main.tex': doc('\\section{Real Paper}', 'short real text.'),
      'extended.tex': doc('\\section{Extended}', prose(400), '\\section{More}', prose(400)),
    };
    const a = await load(dir('readme-xxx', { ...files, '00README.XXX': 'main.tex toplevelfile\nnohypertex\n' }));
    expect(a.mainFile).to.equal('main.tex');
    expect(a.mainRule).to.equal('00README.XXX declares main.tex the top-level file');
    const b = await load(
      dir('readme-json', {
        ...files,
        '00README.json': JSON.stringify({ process: { compiler: 'pdflatex' }, sources: [{ filename: 'main.tex', usage: 'toplevel' }] }),
      }),
    );
    expect(b.mainFile).to.equal('main.tex');
    expect(b.mainRule).to.match(/^00README\.json declares main\.tex/);
    const y = await load(
      dir('readme-yaml', { ...files, '00README.yaml': 'process:\n  compiler: pdflatex\nsources:\n  - filename: main.tex\n    usage: toplevel\n' }),
    );
    expect(y.mainFile).to.equal('main.tex');
    expect(y.mainRule).to.match(/^00README\.yaml declares main\.tex/);
    const c = await load(dir('readme-ignore', { ...files, '00README.XXX': 'extended.tex ignore\n' }));
    expect(c.mainFile).to.equal('main.tex');
    expect(c.mainRule).to.match(/left out: extended\.tex \(00README\.XXX: ignore\)/);
    const e = await load(dir('auto-ignore', { ...files, 'extended.tex': `%auto-ignore\n${files['extended.tex']}` }));
    expect(e.mainFile).to.equal('main.tex');
    expect(e.mainRule).to.match(/left out: extended\.tex \(%auto-ignore\)/);
    // several declared top-level files: assembled in arXiv's (alphanumeric) order, one paper
    const m = await load(
      dir('readme-two', {
        'b-appendix.tex': doc('\\section{Supplementary Proofs}', 'proof text.'),
        'a-main.tex': doc('\\section{Main Text}', 'main text.'),
        '00README.XXX': 'b-appendix.tex toplevelfile\na-main.tex toplevelfile\n',
      }),
    );
    expect(m.mainFile).to.equal('a-main.tex');
    expect(titles(m)).to.deep.equal(['Main Text', 'Supplementary Proofs']);
    expect(m.mainRule).to.equal('00README.XXX declares a-main.tex the top-level file; b-appendix.tex appended (also declared top-level)');
    // without directives the heuristic picks the longer document, and says so (neither name nor title marks one as the paper's own)
    const f = await load(dir('heuristic', files));
    expect(f.mainFile).to.equal('extended.tex');
    expect(f.mainRule).to.match(/^heuristic: article-like, most section text/);
    // bad input: a 00README naming a missing file is a warning naming the 00README; the heuristic decides
    const g = await load(dir('readme-missing', { ...files, '00README.XXX': 'nope.tex toplevelfile\n' }));
    const w = g.warnings.find((x) => x.code === 'readme-missing-file')!;
    expect(formatWarning(w)).to.equal(
      '00README.XXX:1: names "nope.tex" (toplevel), which is not a file in the paper; directive not used [readme-missing-file]',
    );
    expect(g.mainFile).to.equal('extended.tex');
  });

  it('titles: \\icmltitle (not \\icmltitlerunning), \\title[short]{…}, \\title*, and \\thanks / \\footnote / \\tnoteref / \\\\ inside titles', async () => {
    const icml = await load(
      dir('icml', {
        'main.tex': [
          '\\documentclass{article}',
          '\\usepackage{icml2024}',
          '\\icmltitlerunning{Short Running Head}',
          '\\begin{document}',
          '\\twocolumn[',
          '\\icmltitle{Learning Things\\\\ at Scale}',
          ']',
          '\\section{Intro} text.',
          '\\end{document}',
        ].join('\n'),
      }),
    );
    expect(icml.title).to.equal('Learning Things at Scale');
    const t = (src: string) => cleanTitle(findTitle(src) ?? '');
    expect(t('\\title[Short]{A Study\\thanks{Funded by X.}\\\\ of B}')).to.equal('A Study of B');
    expect(t('\\title{Deep Nets\\footnote[2]{Preprint.}}')).to.equal('Deep Nets');
    expect(t('\\title{Elsevier Paper\\tnoteref{t1}}\\tnotetext[t1]{note}')).to.equal('Elsevier Paper');
    expect(t('\\title*{Springer Chapter}')).to.equal('Springer Chapter');
    expect(t('\\title{An ACM \\texorpdfstring{$\\alpha$}{alpha} Paper\\titlenote{Extended.}}')).to.equal('An ACM $\\alpha$ Paper');
    expect(t('\\shorttitle{Run}\\titlerunning{Run}\\Title{MDPI Paper}')).to.equal('MDPI Paper');
    const revtex = await load(
      dir('revtex', {
        'main.tex': [
          '\\documentclass[aps,prl]{revtex4-2}',
          '\\begin{document}',
          '\\title{Quantum Thing\\thanks{A note.}}',
          '\\maketitle',
          '\\section{Intro} text.',
          '\\end{document}',
        ].join('\n'),
      }),
    );
    expect(revtex.title).to.equal('Quantum Thing');
  });

  it('coverage: measured per paper; a source losing text in a way no rule handles gets a coverage warning, shown by the dry run, failing under --strict', async () => {
    const good = await load(dir('good', { 'main.tex': doc('\\section{Intro}', prose(120), '\\section{More}', prose(120, 'ipsum')) }));
    expect(good.coverage.ratio).to.equal(1);
    expect(good.coverage).to.include({ headingsScanned: 2, headingsParsed: 2 });
    expect(good.warnings.map((w) => w.code)).not.to.include('coverage');
    // prose in a macro's optional argument (\twocolumn[…]) is dropped by the converters' option-list rule: no rule knows it is text
    const lossy = dir('lossy', {
      'main.tex': doc('\\section{Intro}', prose(40), '\\twocolumn[' + prose(40, 'teaser') + ']', '\\section{More}', prose(40, 'ipsum')),
    });
    const p = await load(lossy);
    expect(p.coverage.ratio).to.be.below(0.9);
    const w = p.warnings.find((x) => x.code === 'coverage')!;
    expect(formatWarning(w)).to.match(
      /^main\.tex: only \d+\.\d% of the source's 122 prose words reached the text \(threshold 90%\): text may have been lost in ingestion \[coverage\]$/,
    );
    const e = await load(lossy, { strictCoverage: true }).catch((x) => x);
    expect(e).to.be.instanceOf(CoverageError);
    expect(e.message).to.match(/^lossy: text lost in ingestion \(strict\): only/);
    // headings: the scan sees a heading the parse did not reach (a stray \end{document} in an \input'd file cuts the body)
    const cut = await load(
      dir('cut', { 'main.tex': doc('\\section{Intro}', prose(60), '\\input{body}', '\\section{Last}', prose(60, 'ipsum')), 'body.tex': '\\end{document}\n' }),
    );
    expect(cut.coverage.headingsScanned).to.equal(2);
    expect(cut.coverage.missingHeadings).to.deep.equal(['Last']);
    expect(measureCoverage('\\begin{document}x\\end{document}', [], '').ratio).to.equal(1);
    // the dry run shows the rule and the coverage, counts the warning in its last line; --strict fails the paper
    const r = spawnSync(process.execPath, [CLI, 'build-data', '--dry-run', '--papers', lossy, join(work, 'good'), '--out', join(work, 'x.jsonl')], {
      encoding: 'utf8',
    });
    expect(r.status, r.stderr).to.equal(0);
    expect(r.stdout)
      .to.match(/^ {2}main file rule: the only root document$/m)
      .and.match(/^ {2}coverage: \d+\.\d% of 122 prose words, 2\/2 headings$/m);
    expect(r.stdout).to.match(/warning: main\.tex: only .* \[coverage\]/);
    expect(r.stdout.trim().split('\n').at(-1)).to.equal('2 ingested, 0 failed, 1 with coverage warnings');
    const s = spawnSync(process.execPath, [CLI, 'build-data', '--dry-run', '--strict', '--papers', lossy, join(work, 'good'), '--out', join(work, 'x.jsonl')], {
      encoding: 'utf8',
    });
    expect(s.stdout).to.match(/^lossy: failed: lossy: text lost in ingestion \(strict\)/m);
    expect(s.stdout.trim().split('\n').at(-1)).to.equal('1 ingested, 1 failed');
  });

  it('coverage warnings are stored in the SQLite state by the pipeline; strictCoverage fails the paper, also when its parse comes from the state', async () => {
    const lossy = join(work, 'lossy.tar.gz');
    writeFileSync(
      lossy,
      gzipSync(tarOf({ 'main.tex': doc('\\section{Intro}', prose(40), '\\twocolumn[' + prose(40, 'teaser') + ']', '\\section{More}', prose(40, 'ipsum')) })),
    );
    // an LLM that always fails: ingestion (and its warnings) happen before any call
    const llm: JsonLlm = { model: 'none', chatJson: () => Promise.reject(new Error('no LLM in this test')) };
    const state = new PipelineState(join(work, 'state.sqlite'));
    try {
      const r = await buildDataset({ papers: [lossy], llm, state, loadOptions: { inProcess: true, workDir: join(work, 'wd') } });
      expect(r.failures.map((f) => f.error)).to.deep.equal(['no LLM in this test']);
      const stored = state.warnings('lossy').filter((w) => w.code === 'coverage');
      expect(stored).to.have.length(1);
      expect(stored[0]).to.include({ file: 'main.tex' });
      expect(stored[0].message).to.match(/prose words reached the text/);
      // the parse is cached now; a strict run fails the paper from the cached parse too
      const s = await buildDataset({ papers: [lossy], llm, state, loadOptions: { inProcess: true, workDir: join(work, 'wd'), strictCoverage: true } });
      expect(s.failures).to.have.length(1);
      expect(s.failures[0].error).to.match(/^lossy: text lost in ingestion \(strict\): only/);
    } finally {
      state.close();
    }
  });

  it('bad input: an \\input cycle and a conditional never closed are warnings naming the file; runaway macros stop within limits', async () => {
    const d = dir('bad', {
      'main.tex': doc(
        '\\section{Intro} intro text.',
        '\\input{a}',
        '\\newcommand\\again{\\input{leaf}\\again}',
        '\\again',
        '\\section{Open}',
        'open text.',
        '\\iffalse',
        '\\section{Never Closed} lost text',
      ),
      'a.tex': '\\section{A} a text. \\input{b}',
      'b.tex': 'b text. \\input{a}',
      'leaf.tex': 'leaf. ',
    });
    const p = await load(d);
    const ws = p.warnings.map(formatWarning).join('\n');
    expect(ws).to.include('b.tex:1: include cycle at "a"; skipped [include-cycle]');
    expect(ws).to.match(/main\.tex:9: \\iffalse is never closed by \\fi; everything after it was skipped, as TeX would \[conditional-unclosed\]/);
    expect(ws).to.match(/main\.tex:6: \\again still expanding after 20 nested uses \(recursive macro\?\); stopped there \[macro-limit\]/);
    expect(titles(p)).to.deep.equal(['Intro', 'A', 'Open']);
    // a macro expanding without end through \def: expandMacros' limit, warned with the file
    const q = await load(dir('runaway', { 'main.tex': doc('\\def\\x{\\x\\x}', '\\section{Intro} text \\x.') }));
    expect(q.warnings.find((w) => w.code === 'macro-limit')).to.include({ file: 'main.tex' });
  });

  it('bounded expansion: an archive whose files each \\input the next twice fails naming the paper and the limit', async () => {
    const files: Record<string, string> = { 'main.tex': doc('\\section{Fan}', '\\input{f0}\\input{f0}') };
    for (let k = 0; k < 24; k++) files[`f${k}.tex`] = `x\\input{f${k + 1}}\\input{f${k + 1}}\n`;
    files['f24.tex'] = 'leaf\n';
    const archive = join(work, 'fanout.tar.gz');
    writeFileSync(archive, gzipSync(tarOf(files)));
    const t0 = Date.now();
    const e = await load(archive).catch((x) => x);
    expect(e).to.be.instanceOf(ExpansionLimitError);
    expect(e.message).to.match(/fanout\.tar\.gz: sources expand past the limit of 5000 file inclusions \(at "f\d+" included from f\d+\.tex:1\)/);
    expect(Date.now() - t0).to.be.below(20000);
    // a character limit too
    const e2 = await load(archive, { expansionLimits: { maxChars: 2000 } }).catch((x) => x);
    expect(e2.message).to.match(/past the limit of 2000 characters read/);
    // and a normal paper stays well inside the limits
    const ok = await load(dir('ok', { 'main.tex': doc('\\input{a}\\input{a}'), 'a.tex': '\\section{A} a.' }));
    expect(titles(ok)).to.deep.equal(['A', 'A']);
  });
});
