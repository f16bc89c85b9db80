/**
 * Issue 49: the next kinds of real LaTeX, each on a small paper of our own written the way an
 * author would (test/fixtures/tex-kinds/): LaTeX's `\input@path`, `\includeonly`, xparse
 * commands and environments, verbatim-like environments however defined, inline verbatim with
 * options, journal classes' own sectioning and abstract commands (Copernicus, A&A, IEEEtran),
 * the paper's own root among several, and the smaller kinds (environment arguments, `\textbackslash`,
 * `\section[short]{long}`, a real "Contributions" section). And the structural guard: an unknown
 * class's `\introduction` is a warning naming it, failing under `--strict`, counted in the last
 * line of `build-data`; boilerplate skipped with its reason in the dry run and the state.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildDataset, type JsonLlm } from '../lib/data/pipeline.js';
import { PipelineState } from '../lib/data/state.js';
import { CLASS_FAMILIES, classFamilyOf, CoverageError, formatWarning, loadPaper, parseArgSpec, typesetForm, type Paper } from '../lib/data/latex/index.js';
import { between } from './helpers/fake-llm.js';

const here = dirname(fileURLToPath(import.meta.url));
const KINDS = join(here, '..', '..', 'test', 'fixtures', 'tex-kinds');
const CLI = join(here, '..', '..', 'dist', 'bin', 'papergym-native.js');

const titles = (p: Paper) => p.sections.filter((s) => s.level !== 'front').map((s) => s.title);
const allText = (p: Paper) => [p.abstract, ...p.sections.map((s) => s.text)].join('\n');

describe('data: issue 49 kinds of LaTeX, read as TeX typesets them', function () {
  this.timeout(60000);
  let work: string;
  beforeEach(() => {
    work = mkdtempSync(join(tmpdir(), 'pg-kinds-'));
  });
  afterEach(() => rmSync(work, { recursive: true, force: true }));
  const load = (kind: string, o: Parameters<typeof loadPaper>[1] = {}) => loadPaper(join(KINDS, kind), { workDir: join(work, 'wd'), inProcess: true, ...o });
  /** Ingested with every heading parsed, all prose kept, and not a single warning. */
  const clean = (p: Paper) => {
    expect(p.warnings.map(formatWarning)).to.deep.equal([]);
    expect(p.coverage.headingsParsed).to.equal(p.coverage.headingsScanned);
    expect(p.coverage.ratio).to.be.at.least(0.98);
    expect(p.structure.problems).to.deep.equal([]);
  };

  it('\\def\\input@path{{sections/}{appendix/}} (in \\makeatletter) is the search path of \\input', async () => {
    const p = await load('input-path');
    expect(titles(p)).to.deep.equal(['Introduction', 'Method', 'Results', 'Likelihood derivations']);
    expect(p.sections.at(-1)!.appendix).to.equal(true);
    expect(p.files).to.include.members(['sections/introduction.tex', 'appendix/derivations.tex']);
    expect(p.missingIncludes).to.deep.equal([]);
    clean(p);
  });

  it('\\includeonly: an \\include not listed is excluded (counted, with the reason), not read as a section', async () => {
    const p = await load('includeonly');
    expect(titles(p)).to.deep.equal(['Introduction', 'Experiments']);
    expect(allText(p)).not.to.include('Reviewer two');
    const ex = p.structure.excluded.find((e) => e.what === 'response-to-reviewers')!;
    expect(ex.reason).to.equal('not in \\includeonly{intro,experiments}');
    // "Response to the reviewers" + its two sentences: 3 + 21 words of three letters or more
    expect(ex.words).to.equal(24);
    clean(p);
  });

  it('xparse: \\NewDocumentCommand / \\DeclareDocumentCommand / \\ProvideDocumentCommand / \\RenewDocumentCommand and environments, specs s O{} m +m d() e{} t+ b', async () => {
    expect(parseArgSpec('s O{x} m t+ r<> d() e{_^} E{ab}{{1}{2}} +b >{\\TrimSpaces}v')).to.deep.equal([
      { kind: 's' },
      { kind: 'o', default: 'x' },
      { kind: 'm' },
      { kind: 't', token: '+' },
      { kind: 'r', token: '<', close: '>' },
      { kind: 'd', token: '(', close: ')' },
      { kind: 'e', token: '_' },
      { kind: 'e', token: '^' },
      { kind: 'e', token: 'a', default: '1' },
      { kind: 'e', token: 'b', default: '2' },
      { kind: 'b' },
      { kind: 'v' },
    ]);
    expect(parseArgSpec('u{stop}')).to.equal(undefined);
    const p = await load('xparse');
    expect(p.title).to.equal('GraphFlow: Routing on OpenRoads');
    expect(titles(p)).to.deep.equal(['Introduction', 'Method', 'Acknowledgements']);
    expect(p.sections.map((s) => s.starred)).to.deep.equal([false, false, true]);
    const t = allText(p);
    expect(t).to.include('GraphFlow updates shortest paths incrementally on OpenRoads');
    expect(t).not.to.include('Check this number');
    expect(t).to.include('the pair a,b with an empty pair');
    expect(t).to.include('speed of trucks and speed squared');
    expect(t).to.include('strict bounds or loose bounds');
    expect(t).not.to.include('Unfinished');
    expect(p.structure.commands).to.deep.include({
      command: 'paperSection',
      origin: 'user macro',
      uses: 3,
      outcome: 'heading',
      reason: 'expanded into headings',
    });
    clean(p);
  });

  it('verbatim-like environments however defined: \\newenvironment{code}{\\verbatim}{\\endverbatim}, \\lstnewenvironment in a package of the paper, \\DefineVerbatimEnvironment, \\newminted', async () => {
    const p = await load('verbatim-envs');
    expect(titles(p)).to.deep.equal(['Introduction', 'Examples', 'Conclusion']);
    expect(p.sections.every((s) => s.subheadings.length === 0)).to.equal(true);
    const ex = p.sections.find((s) => s.title === 'Examples')!.text;
    expect(ex).to.include('\\section{Results}   % this is not a heading of the paper\n100% of the runs passed');
    expect(ex).to.include('def load(path):  # 50% faster than before');
    expect(ex).to.include('$ latexmk -pdf main.tex   % builds twice');
    expect(ex).to.include('\\subsection{Inside minted} % still code');
    clean(p);
  });

  it('inline verbatim with any options: \\lstinline[language={[LaTeX]TeX}]{…}, \\lstinline|…|, \\mintinline{lang}{…}, \\verb', async () => {
    const p = await load('inline-verbatim');
    expect(titles(p)).to.deep.equal(['Commands', 'Advice']);
    expect(p.sections[0].text).to.equal(
      'Start a section with \\section{Title} and a paragraph heading with \\paragraph{Title}; both take a short form in brackets, as in \\section[Short]{A long title}, and \\chapter only exists in book-like classes. A literal percent is 50% in code. The rest of this paragraph must stay in the text after all that code.',
    );
    clean(p);
  });

  it("Copernicus: \\introduction, \\conclusions[…] and the statements (\\codeavailability{…}, …) are the class's sections", async () => {
    const p = await load('copernicus');
    expect(p.classFamily).to.equal('copernicus');
    expect(titles(p)).to.deep.equal([
      'Introduction',
      'Model description',
      'Evaluation',
      'Summary and outlook',
      'Code availability',
      'Author contributions',
      'Competing interests',
    ]);
    expect(p.sections[0].text).to.match(/^Snow cover controls/);
    expect(p.sections.filter((s) => s.boilerplate).map((s) => s.boilerplateReason)).to.deep.equal([
      'data/code availability statement',
      'author contributions',
      'competing interests',
    ]);
    clean(p);
  });

  it("A&A: the five-part \\abstract{context}{aims}{methods}{results}{conclusions} is one abstract with the class's run-in labels", async () => {
    const p = await load('aanda');
    expect(p.classFamily).to.equal('aanda');
    expect(p.abstract.split('\n\n')).to.deep.equal([
      'Context. Dust lanes hide the midplanes of edge-on galaxies.',
      'Aims. We measure the vertical extent of dust in thirty edge-on spirals.',
      'Methods. We fit radiative transfer models to near-infrared images.',
      'Results. The dust scale height is one third of the stellar scale height in every galaxy.',
      "Conclusions. Dust settles in a thin layer regardless of the galaxy's mass.",
    ]);
    expect(titles(p)).to.deep.equal(['Introduction', 'Observations', 'Conclusions']);
    clean(p);
  });

  it('one registry of class families, picked by \\documentclass or a journal package', () => {
    expect(CLASS_FAMILIES.names()).to.deep.equal(['copernicus', 'aanda', 'jhep', 'revtex', 'ieeetran', 'acmart', 'springer', 'elsarticle']);
    const fam = (pre: string) => classFamilyOf(`${pre}\n\\begin{document}\n\\end{document}`)?.name;
    expect(fam('\\documentclass[aps,prl,twocolumn]{revtex4-2}')).to.equal('revtex');
    expect(fam('\\documentclass[a4paper,11pt]{article}\n\\usepackage{amsmath, jheppub}')).to.equal('jhep');
    expect(fam('\\documentclass[sigconf]{acmart}')).to.equal('acmart');
    expect(fam('\\documentclass[runningheads]{llncs}')).to.equal('springer');
    expect(fam('\\documentclass[smallextended]{svjour3}')).to.equal('springer');
    expect(fam('\\documentclass[preprint,12pt]{elsarticle}')).to.equal('elsarticle');
    expect(fam('\\documentclass{article}')).to.equal(undefined);
  });

  it('IEEEtran: \\IEEEPARstart{K}{eyword} is the first word', async () => {
    const p = await load('ieeetran');
    expect(p.sections[0].text).to.match(/^Keyword spotting wakes a device/);
    clean(p);
  });

  it('the smaller kinds: environment arguments and spaced \\begin {x} leak no words, \\textbackslash paragraph, \\section[short]{long}, a real Contributions section', async () => {
    expect(typesetForm('\\begin {multicols}{2}Two\\end {multicols}')).to.equal('\\begin{multicols}{}Two\\end{multicols}');
    const p = await load('small-kinds');
    expect(titles(p)).to.deep.equal(['Why sectioning commands matter for machine readers', 'Contributions', 'Author contributions']);
    const first = p.sections[0].text;
    expect(first).to.include('The command \\paragraph makes a run-in heading, and \\section a numbered one.');
    expect(first).to.include('Two columns of text').and.include('An indented block keeps its words.');
    expect(first).not.to.match(/\btheorem\b|1cm|\b2\b/);
    expect(p.sections.map((s) => s.boilerplateReason)).to.deep.equal([undefined, undefined, 'author contributions']);
    expect(p.coverage.ratio).to.equal(1);
    clean(p);
  });

  it("the paper's own root among several: the archive's name, title and abstract win over an online appendix and a code write-up with more text; a missing include in it fails naming the file", async () => {
    const e = await load('HAFiscal').catch((x: Error) => x);
    expect(e).to.be.instanceOf(Error);
    expect((e as Error).message).to.match(
      /HAFiscal: the paper's main file HAFiscal\.tex \(heuristic: article-like, the paper's own root .*\) includes "Subfiles\/Model", missing from the source; not ingesting another root/,
    );
    // with the file in place the paper is read, not its appendix
    const d = join(work, 'HAFiscal');
    cpSync(join(KINDS, 'HAFiscal'), d, { recursive: true });
    writeFileSync(
      join(d, 'Subfiles', 'Model.tex'),
      '\\section{Model}\nHouseholds differ in education and face idiosyncratic income shocks and unemployment spells.\n',
    );
    const p = await loadPaper(d, { workDir: join(work, 'wd'), inProcess: true });
    expect(p.mainFile).to.equal('HAFiscal.tex');
    expect(titles(p)).to.deep.equal(['Introduction', 'Model', 'Conclusion']);
    const app = p.rootCandidates.find((c) => c.file === 'HAFiscal-Online-Appendix.tex')!;
    expect(app.sectionChars).to.be.greaterThan(p.rootCandidates[0].sectionChars);
    expect(app.reason).to.match(/^article-like, a companion document/);
    expect(p.warnings.map((w) => w.code)).to.deep.equal(['several-roots']);
  });

  it("the structural guard: an unknown class's \\introduction is a warning naming it; --strict fails it; the dry run counts it and lists skipped sections with their reasons", async () => {
    const p = await load('unknown-class');
    const st = p.warnings.filter((w) => w.code === 'structure').map(formatWarning);
    expect(st).to.deep.equal([
      'main.tex: \\introduction looks like a sectioning command of class geojournal, which this reader does not know; 1 heading(s) may be lost [structure]',
      'main.tex: \\conclusions looks like a sectioning command of class geojournal, which this reader does not know; 1 heading(s) may be lost [structure]',
    ]);
    const e = await load('unknown-class', { strictCoverage: true }).catch((x) => x);
    expect(e).to.be.instanceOf(CoverageError);
    const papers = ['unknown-class', 'copernicus', 'includeonly', 'HAFiscal'].map((k) => join(KINDS, k));
    const r = spawnSync(process.execPath, [CLI, 'build-data', '--dry-run', '--papers', ...papers], { encoding: 'utf8' });
    expect(r.status, r.stderr).to.equal(0);
    expect(r.stdout).to.match(/^ {4}section\* "Author contributions" \d+ chars \(skipped: author contributions\)$/m);
    expect(r.stdout).to.match(/^ {2}structure: 7 heading\(s\); \\introduction ×1 → heading \(class copernicus: the class's section "Introduction"\);/m);
    // an acknowledgements environment is never stage text either: listed with its reason, not dropped silently
    expect(r.stdout).to.include('skipped: "Acknowledgements" (acknowledgements (\\begin{acknowledgements} environment))');
    expect(r.stdout).to.match(/excluded: response-to-reviewers \(not in \\includeonly\{intro,experiments\}, 24 words\)/);
    expect(r.stdout).to.match(/^HAFiscal: failed: .*includes "Subfiles\/Model", missing from the source/m);
    expect(r.stdout.trim().split('\n').at(-1)).to.equal('3 ingested, 1 failed, 1 with coverage warnings, 1 with structure warnings');
    const s = spawnSync(process.execPath, [CLI, 'build-data', '--dry-run', '--strict', '--papers', ...papers], { encoding: 'utf8' });
    expect(s.stdout).to.match(/^unknown-class: failed: unknown-class: text lost in ingestion \(strict\)/m);
    expect(s.stdout.trim().split('\n').at(-1)).to.equal('2 ingested, 2 failed');
  });

  it('a paper with no section (an \\iffalse never closed, a beamer-only source) fails naming why; every structure-kind warning is counted', async () => {
    const { mkdirSync } = await import('node:fs');
    const paper = (name: string, tex: string) => {
      const d = join(work, 'zero', name);
      mkdirSync(d, { recursive: true });
      writeFileSync(join(d, 'main.tex'), tex);
      return d;
    };
    const prose = 'We measure the effect of the method on many datasets and report every result in full detail here. '.repeat(4);
    const papers = [
      paper(
        'unclosed',
        `\\documentclass{article}\n\\begin{document}\n\\begin{abstract}We study things.\\end{abstract}\n\\section{Only \\iffalse broken\n\n${prose}\n\\end{document}\n`,
      ),
      paper('slides', '\\documentclass{beamer}\n\\begin{document}\n\\begin{frame}Hello slide words\\end{frame}\n\\end{document}\n'),
      paper(
        'late-iffalse',
        `\\documentclass{article}\n\\begin{document}\n\\section{Intro}\n${prose}\n\\section{Method}\n${prose}\n\\iffalse\nold draft\n\\end{document}\n`,
      ),
    ];
    const e = await loadPaper(papers[0]!, { inProcess: true, workDir: join(work, 'wd0') }).catch((x) => x);
    expect(e).to.be.instanceOf(CoverageError);
    expect(e.message).to.match(/^unclosed: no section reached the text \(0 section\(s\), coverage: /);
    expect(e.message).to.include('[conditional-unclosed]');
    const r = spawnSync(process.execPath, [CLI, 'build-data', '--dry-run', '--papers', ...papers], { encoding: 'utf8' });
    expect(r.status, r.stderr).to.equal(0);
    expect(r.stdout).to.match(/^slides: failed: slides: no section reached the text \(0 section\(s\), coverage: 0\.0% .*\[no-article-root\]$/m);
    expect(r.stdout).to.match(/^late-iffalse: ingested: .* 2 section\(s\)$/m);
    expect(r.stdout.trim().split('\n').at(-1)).to.equal('1 ingested, 2 failed, 1 with structure warnings');
  });

  it('a first \\section*{Abstract} (no abstract environment) is taken as the abstract and stays a section', async () => {
    const { mkdirSync } = await import('node:fs');
    const d = join(work, 'abs-section');
    mkdirSync(d, { recursive: true });
    const abs = 'We present a method for quantum control and show that it converges on every benchmark we tried.';
    const body = 'The method is described here in detail, with every step of the derivation given in full. '.repeat(4);
    writeFileSync(
      join(d, 'main.tex'),
      `\\documentclass{article}\n\\begin{document}\n\\section*{Abstract}\n${abs}\n\\section{Introduction}\n${body}\n\\end{document}\n`,
    );
    const p = await loadPaper(d, { inProcess: true, workDir: join(work, 'wd-abs') });
    expect(p.abstract).to.equal(abs);
    expect(p.sections.filter((s) => s.level !== 'front').map((s) => s.title)).to.deep.equal(['Abstract', 'Introduction']);
    // The item builder maps its text once, as the abstract, not again as the section: two map
    // units (abstract, introduction) in the state, the later stages refused by this LLM.
    const mapped: string[] = [];
    const llm: JsonLlm = {
      model: 'none',
      chatJson: <T>(_schema: object, req: { messages: { role: string; content: unknown }[] }) => {
        const user = req.messages.filter((m) => m.role === 'user').at(-1)?.content;
        if (typeof user !== 'string' || !user.includes('<section_title>')) return Promise.reject(new Error('no LLM past the map stage in this test'));
        mapped.push(between(user, 'section_title'));
        const value = { goals: [], background: [], methods: [], experimental_design: [] } as T;
        return Promise.resolve({
          value,
          repaired: false,
          content: JSON.stringify(value),
          finishReason: 'stop',
          usage: { promptTokens: 1, completionTokens: 1 },
          attempts: 1,
          model: 'none',
        } as never);
      },
    };
    const state = new PipelineState(join(work, 'state-abs.sqlite'));
    try {
      await buildDataset({ papers: [d], llm, state, loadOptions: { inProcess: true, workDir: join(work, 'wd-abs2') } });
      const units = Object.keys(state.stages(p.id)).filter((k) => k.startsWith('map:'));
      expect(units).to.deep.equal(['map:000', 'map:001']);
    } finally {
      state.close();
    }
    expect(mapped.sort()).to.deep.equal(['Abstract', 'Introduction']);
  });

  it('sections skipped as boilerplate are stored with their reasons in the pipeline state', async () => {
    const llm: JsonLlm = { model: 'none', chatJson: () => Promise.reject(new Error('no LLM in this test')) };
    const state = new PipelineState(join(work, 'state.sqlite'));
    try {
      await buildDataset({ papers: [join(KINDS, 'copernicus')], llm, state, loadOptions: { inProcess: true, workDir: join(work, 'wd') } });
      expect(state.stages('copernicus')['skipped-sections']).to.deep.equal([
        { title: 'Code availability', reason: 'data/code availability statement' },
        { title: 'Author contributions', reason: 'author contributions' },
        { title: 'Competing interests', reason: 'competing interests' },
        { title: 'Acknowledgements', reason: 'acknowledgements (\\begin{acknowledgements} environment)' },
      ]);
    } finally {
      state.close();
    }
  });
});
