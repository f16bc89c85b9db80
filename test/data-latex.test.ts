import { expect } from 'chai';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import {
  ArchiveError,
  loadPaper,
  stripComments,
  stripIffalse,
  unpackSource,
  findMainFile,
  flattenDocument,
  expandSimpleMacros,
  latexToTextBatch,
  fallbackToText,
  parseToText,
  formatWarning,
} from '../lib/data/latex/index.js';

const here = dirname(fileURLToPath(import.meta.url));
// dist/test → repo root
const FIX = join(here, '..', '..', 'test', 'fixtures', 'papers');

/** Minimal ustar writer for hostile archives. type: '0' file, '1' hardlink, '2' symlink, '3' char dev, '4' block dev, '5' dir, '6' fifo. */
function tarEntry(name: string, type: string, data = Buffer.alloc(0), linkname = ''): Buffer {
  const h = Buffer.alloc(512);
  h.write(name.slice(0, 100), 0, 'utf8');
  h.write('0000644\0', 100);
  h.write('0000000\0', 108);
  h.write('0000000\0', 116);
  h.write(data.length.toString(8).padStart(11, '0') + '\0', 124);
  h.write('00000000000\0', 136);
  h.write('        ', 148);
  h.write(type, 156);
  h.write(linkname, 157);
  h.write('ustar\0', 257);
  h.write('00', 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  const pad = Buffer.alloc((512 - (data.length % 512)) % 512);
  return Buffer.concat([h, data, pad]);
}
function tarOf(entries: Buffer[]): Buffer {
  return Buffer.concat([...entries, Buffer.alloc(1024)]);
}
const DOC = Buffer.from('\\documentclass{article}\\begin{document}\\section{Intro} Hello.\\end{document}\n');

describe('data: LaTeX cleaning', () => {
  it('removes comments but keeps escaped percent signs', () => {
    const s = stripComments('a 50\\% b % secret\n% whole line secret\nc \\\\% secret2\n\\begin{comment}hidden\\end{comment}d');
    expect(s).to.include('50\\%').and.include('b').and.include('c \\\\').and.include('d');
    expect(s).not.to.match(/secret|hidden/);
  });
  it('removes \\iffalse blocks with nesting and keeps \\else branches', () => {
    expect(stripIffalse('a \\iffalse x \\ifx y \\fi z \\fi b')).to.equal('a  b');
    expect(stripIffalse('a \\iffalse x \\else y \\fi b')).to.equal('a  y  b');
    expect(stripIffalse('\\iffalse never closed')).to.equal('');
  });
  it('expands simple macros', () => {
    const s = expandSimpleMacros('\\newcommand\\pysr{\\textsc{PySR}\\xspace}\\newcommand{\\wrap}[1]{<#1>}\\def\\lw{LEGWORK}\\pysr is \\lw{} and \\wrap{x}');
    expect(s).to.equal('\\textsc{PySR} is LEGWORK and <x>');
  });
  it('converts with the parser and with the fallback', () => {
    const src = 'Some \\textbf{bold} text~\\citep{k}, \\citeauthor{k} said $x^2$.\\footnote{fn} \\label{l}\\begin{itemize}\\item one\\end{itemize}';
    for (const t of [parseToText(src), fallbackToText(src)]) {
      expect(t)
        .to.include('bold')
        .and.match(/\$x\^\{?2\}?\$/)
        .and.include('the authors')
        .and.include('- one');
      expect(t).not.to.match(/\\textbf|\\label|\{k\}/);
    }
  });
  it('falls back when the parse exceeds its time limit', async () => {
    const big = 'word \\textbf{x} '.repeat(20000);
    const [r] = await latexToTextBatch([big], { timeoutMs: 1, maxParseChars: 1e9 });
    expect(r.parser).to.equal('fallback');
    expect(r.reason).to.equal('timeout');
    expect(r.text).to.include('word x');
    const [s] = await latexToTextBatch(['a \\emph{b}'], { timeoutMs: 5000 });
    expect(s).to.deep.equal({ text: 'a b', parser: 'unified-latex' });
  });
});

describe('data: includes and structure (synthetic)', function () {
  this.timeout(30000);
  let dir: string;
  let outside: string;
  before(() => {
    const base = mkdtempSync(join(tmpdir(), 'pg-latex-'));
    dir = join(base, 'paper');
    outside = join(base, 'outside.tex');
    writeFileSync(outside, 'OUTSIDE_SECRET');
    mkdirSync(join(dir, 'sec', 'deep'), { recursive: true });
    writeFileSync(
      join(dir, 'main.tex'),
      [
        '\\documentclass{article}',
        'PREAMBLE_MARKER \\newcommand\\tool{ToolX}',
        '\\title{A \\emph{Test} Paper}',
        '\\begin{document}',
        '\\begin{abstract}We study things.\\end{abstract}',
        '\\input{sec/intro}',
        '% \\input{sec/commented}',
        '\\iffalse \\input{sec/disabled} \\fi',
        '\\include{sec/method.tex}',
        '\\subfile{sec/sub}',
        '\\import{sec/}{imported}',
        '\\input{missing-file}',
        '\\input{../outside}',
        '\\input{sec/link}',
        '\\input sec/primitive.tex',
        '\\appendix',
        '\\section{Extra}',
        'Appendix text.',
        '\\end{document}',
        'TRAILER_MARKER',
      ].join('\n'),
    );
    writeFileSync(join(dir, 'sec', 'intro.tex'), '\\section{Introduction}\nIntro uses \\tool. 50\\% done. % COMMENT_MARKER\n\\paragraph{Para} para text.');
    writeFileSync(join(dir, 'sec', 'commented.tex'), 'COMMENTED_INCLUDE');
    writeFileSync(join(dir, 'sec', 'disabled.tex'), 'DISABLED_INCLUDE');
    writeFileSync(join(dir, 'sec', 'method.tex'), '\\section*{Methods}\nMethod text.');
    writeFileSync(join(dir, 'sec', 'sub.tex'), '\\subsection{Sub} Subfile text.');
    writeFileSync(join(dir, 'sec', 'imported.tex'), '\\section{Imported} \\subimport{deep/}{inner}');
    writeFileSync(join(dir, 'sec', 'deep', 'inner.tex'), 'Inner text via subimport.');
    writeFileSync(join(dir, 'sec', 'primitive.tex'), 'Primitive input text.');
    writeFileSync(join(dir, 'sec', 'binary.png'), Buffer.from([0x89, 0x50, 0, 0, 1, 2]));
    symlinkSync(outside, join(dir, 'sec', 'link.tex'));
  });
  after(() => rmSync(dirname(dir), { recursive: true, force: true }));

  it('resolves includes relative to the root and refuses escapes', () => {
    const warns: string[] = [];
    expect(findMainFile(dir)).to.equal('main.tex');
    const f = flattenDocument(dir, 'main.tex', (w) => warns.push(formatWarning(w)));
    expect(f.text)
      .to.include('Intro uses')
      .and.include('Method text')
      .and.include('Subfile text')
      .and.include('Inner text via subimport')
      .and.include('Primitive input text');
    expect(f.text).not.to.match(/OUTSIDE_SECRET|COMMENTED_INCLUDE|DISABLED_INCLUDE|COMMENT_MARKER/);
    expect(f.missing).to.deep.equal(['missing-file']);
    expect(warns.join('\n')).to.match(/outside the paper root/);
  });

  it('extracts title, abstract and sections (starred, paragraph, appendix), nothing outside document', async () => {
    const p = await loadPaper(dir, { domain: 'test' });
    expect(p.title).to.equal('A Test Paper');
    expect(p.abstract).to.equal('We study things.');
    expect(p.sections.map((s) => s.title)).to.deep.equal(['Introduction', 'Methods', 'Imported', 'Extra']);
    expect(p.sections[1].starred).to.equal(true);
    expect(p.sections[1].subheadings).to.deep.equal(['Sub']);
    expect(p.sections[0].subheadings).to.deep.equal(['Para']);
    expect(p.sections[3].appendix).to.equal(true);
    expect(p.sections[0].text).to.include('ToolX').and.include('50%');
    const all = p.sections.map((s) => s.text).join('\n');
    expect(all).not.to.match(/PREAMBLE_MARKER|TRAILER_MARKER|OUTSIDE_SECRET|COMMENT_MARKER|We study things/);
  });
});

describe('data: the four fixture papers', function () {
  this.timeout(120000);
  const expected: Record<string, { title: RegExp; sections: string[]; files: number; abstract: RegExp }> = {
    'cs-pysr': {
      title: /Interpretable Machine Learning for Science/,
      sections: ['Introduction', 'Methods', 'Evaluation', 'Conclusion'],
      files: 1,
      abstract: /open-source library for practical/,
    },
    'cs-scipy-1.0': {
      title: /SciPy 1\.0/,
      sections: [
        'Introduction',
        'Background',
        'Architecture and implementation choices',
        'Key technical improvements',
        'Project organization and community',
        'Discussion',
      ],
      files: 7,
      abstract: /open source scientific computing library/,
    },
    'econ-financial-macro-replication': {
      title: /Macroeconomic Effects of Financial Shocks/,
      sections: ['Introduction', 'Data', 'Baseline Model', 'Extended Model', 'Conclusion', 'Appendix'],
      files: 15,
      abstract: /^$/,
    },
    'physics-legwork': {
      title: /^LEGWORK: A python package/,
      sections: ['Introduction', 'Package Overview', 'Derivations', 'Use cases', 'Conclusion & Summary'],
      files: 1,
      abstract: /We present LEGWORK/,
    },
  };
  for (const [id, exp] of Object.entries(expected)) {
    it(`${id}: sections found, includes resolved, no comments, nothing outside document`, async () => {
      const archive = join(FIX, `${id}.tar.gz`);
      const p = await loadPaper(archive);
      expect(p.id).to.equal(id);
      expect(p.title).to.match(exp.title);
      expect(p.abstract).to.match(exp.abstract);
      const titles = p.sections.filter((s) => s.level !== 'front' && !s.boilerplate).map((s) => s.title);
      expect(titles).to.deep.equal(exp.sections);
      expect(p.files.length).to.equal(exp.files);
      for (const s of p.sections)
        expect(s.text.replace(/\$\$[\s\S]*?\$\$|\$[^$]*\$/g, ''), s.title).not.to.match(/\\(section|begin|end|input|include|cite|label)\b/);
      // No comment text survives: take every substantial comment of every .tex in the archive.
      const src = await unpackSource(archive);
      try {
        const all = p.sections.map((s) => s.text).join('\n') + p.abstract;
        const texFiles: string[] = [];
        const walk = (d: string) => {
          for (const e of readdirSync(d, { withFileTypes: true })) {
            const q = join(d, e.name);
            if (e.isDirectory()) walk(q);
            else if (e.name.endsWith('.tex')) texFiles.push(q);
          }
        };
        walk(src.root);
        let checked = 0;
        for (const f of texFiles) {
          const raw = readFileSync(f, 'utf8');
          for (const line of raw.split('\n')) {
            const m = /(?<!\\)%+\s*([A-Za-z][A-Za-z ,'-]{30,})/.exec(line);
            if (!m) continue;
            const frag = m[1].trim().slice(0, 40);
            // only comments whose text is not also live text elsewhere
            const live = stripComments(raw);
            if (live.includes(frag)) continue;
            checked++;
            expect(all, `comment text leaked: ${frag}`).not.to.include(frag);
          }
          // text after \end{document} never appears
          const tail = /\\end\{document\}([\s\S]*)$/.exec(stripComments(raw))?.[1]?.trim();
          if (tail && tail.length > 20) expect(all).not.to.include(tail.slice(0, 40));
        }
        if (id === 'cs-scipy-1.0') expect(checked).to.be.greaterThan(10);
      } finally {
        src.cleanup();
      }
      if (id === 'econ-financial-macro-replication') {
        // \input{figures/...} and tables resolved; missing generated tables tolerated with warnings
        expect(p.files).to.include('econ-financial-macro-replication/src/paper/section_data.tex');
        expect(p.missingIncludes.length).to.be.greaterThan(0);
        expect(p.warnings.map(formatWarning).join('\n')).to.match(/not found; skipped/);
        expect(p.warnings.find((w) => w.code === 'include-missing')).to.include.keys('file', 'line');
        expect(p.sections.find((s) => s.title === 'Appendix')!.appendix).to.equal(true);
      }
      if (id === 'cs-scipy-1.0') {
        expect(p.mainFile).to.match(/paper\.tex$/);
        expect(p.sections.find((s) => s.title === 'Key technical improvements')!.text).to.include('interior-point');
        expect(p.sections.every((s) => s.starred)).to.equal(true);
        expect(p.sections.find((s) => /Acknowledgements/.test(s.title))!.boilerplate).to.equal(true);
      }
      if (id === 'cs-pysr') expect(p.sections.find((s) => s.title === 'Introduction')!.subheadings).to.include('Symbolic Regression.');
    });
  }
});

describe('data: hostile archives', function () {
  this.timeout(60000);
  let work: string;
  beforeEach(() => {
    work = mkdtempSync(join(tmpdir(), 'pg-hostile-'));
  });
  afterEach(() => rmSync(work, { recursive: true, force: true }));
  const write = (name: string, buf: Buffer) => {
    const p = join(work, name);
    writeFileSync(p, buf);
    return p;
  };
  const expectRefused = async (p: string, code: string, limits = {}) => {
    const wd = join(work, 'wd');
    const err = await unpackSource(p, { workDir: wd, limits }).then(
      () => undefined,
      (e) => e,
    );
    expect(err, `${code} not refused`).to.be.instanceOf(ArchiveError);
    expect(err.code).to.equal(code);
    // nothing left behind and nothing written outside
    expect(existsSync(wd) ? readdirSync(wd) : []).to.deep.equal([]);
    expect(existsSync(join(work, 'escaped.tex'))).to.equal(false);
    expect(existsSync('/tmp/pg-abs-escape.tex')).to.equal(false);
    return err as ArchiveError;
  };

  it('accepts a clean archive and a single gzipped .tex', async () => {
    const a = await unpackSource(write('ok.tar.gz', gzipSync(tarOf([tarEntry('p/', '5'), tarEntry('p/main.tex', '0', DOC)]))), { workDir: join(work, 'wd') });
    expect(a.files).to.deep.equal(['p/main.tex']);
    a.cleanup();
    const p = await loadPaper(write('single.gz', gzipSync(DOC)), { workDir: join(work, 'wd') });
    expect(p.sections.map((s) => s.title)).to.deep.equal(['Intro']);
  });
  it('refuses absolute paths', async () => {
    await expectRefused(write('abs.tar.gz', gzipSync(tarOf([tarEntry('/tmp/pg-abs-escape.tex', '0', DOC)]))), 'absolute-path');
  });
  it('refuses .. components', async () => {
    await expectRefused(write('dots.tar', tarOf([tarEntry('p/main.tex', '0', DOC), tarEntry('p/../../escaped.tex', '0', DOC)])), 'path-traversal');
  });
  it('refuses symlinks and hard links', async () => {
    await expectRefused(write('sym.tar.gz', gzipSync(tarOf([tarEntry('p/link.tex', '2', Buffer.alloc(0), '/etc/passwd')]))), 'link');
    await expectRefused(
      write('hard.tar.gz', gzipSync(tarOf([tarEntry('p/main.tex', '0', DOC), tarEntry('p/hard.tex', '1', Buffer.alloc(0), 'p/main.tex')]))),
      'link',
    );
  });
  it('refuses device files and FIFOs', async () => {
    await expectRefused(write('chr.tar.gz', gzipSync(tarOf([tarEntry('p/null', '3')]))), 'device');
    await expectRefused(write('blk.tar', tarOf([tarEntry('p/sda', '4')])), 'device');
    await expectRefused(write('fifo.tar', tarOf([tarEntry('p/fifo', '6')])), 'device');
  });
  it('refuses a decompression bomb by ratio and by expanded size', async () => {
    const bomb = gzipSync(tarOf([tarEntry('p/main.tex', '0', DOC), tarEntry('p/zeros.tex', '0', Buffer.alloc(30 * 2 ** 20))]), { level: 9 });
    const e = await expectRefused(write('bomb.tar.gz', bomb), 'ratio');
    expect(e.message).to.match(/ratio/);
    await expectRefused(write('big.tar.gz', bomb), 'too-large', { maxExpandedBytes: 2 ** 20, maxRatio: 1e9 });
  });
  it('refuses too many files and oversized archives', async () => {
    const many = tarOf(Array.from({ length: 30 }, (_, i) => tarEntry(`p/f${i}.tex`, '0', DOC)));
    const e = await expectRefused(write('many.tar', many), 'too-many-files', { maxFiles: 10 });
    expect(e.message).to.match(/more than 10 members/);
    await expectRefused(write('huge.tar', many), 'too-large', { maxArchiveBytes: 1000 });
  });
  it('rejects corrupt archives with a clear error', async () => {
    const err = await unpackSource(write('bad.tar.gz', Buffer.concat([gzipSync(tarOf([tarEntry('p/main.tex', '0', DOC)])).subarray(0, 40)])), {
      workDir: join(work, 'wd'),
    }).catch((e) => e);
    expect(err).to.be.instanceOf(ArchiveError);
    expect(err.code).to.equal('corrupt');
  });
  it('reports a corrupt archive as corrupt (not as an unsupported source) and names the file', async () => {
    const good = gzipSync(tarOf([tarEntry('p/main.tex', '0', DOC)]));
    const random = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919 + 13) % 251));
    const cases: [string, Buffer][] = [
      ['truncated.tar.gz', good.subarray(0, good.length - 20)],
      ['random.tar.gz', random],
      ['random.tgz', random],
      ['empty.tar.gz', Buffer.alloc(0)],
      ['random.gz', random],
      ['random.tar', random],
    ];
    for (const [name, buf] of cases) {
      const p = write(name, buf);
      const err = await expectRefused(p, 'corrupt');
      expect(err.message, name).to.match(/corrupt or unreadable archive/);
      expect(err.message, name).to.include(p);
      expect(err.message, name).not.to.match(/unsupported/);
      const viaLoad = await loadPaper(p, { workDir: join(work, 'wd') }).catch((e) => e);
      expect(viaLoad.message, name).to.equal(err.message);
    }
    // a file that does not claim to be an archive is still "unsupported"
    const notes = write('notes.txt', random);
    expect((await expectRefused(notes, 'corrupt')).message).to.match(/unsupported paper source .*notes\.txt/);
  });
});
