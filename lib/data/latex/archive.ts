/**
 * Safe unpacking of arXiv-style paper sources (docs/design.md §7: "archive members with `..` or
 * absolute paths refused"). What a source is comes from its bytes, not its name: a directory is
 * used in place; gzip data is decompressed and then read as a tar archive when it is one, else as
 * a single TeX file (arXiv ships single-file papers gzipped, and download tools often name those
 * `X.tar.gz`); plain tar; a plain TeX file (also without an extension, as e-prints come). A PDF
 * (plain or gzipped) is refused with code `no-latex` ("no LaTeX sources found").
 *
 * The archive is streamed once (gunzip → node-tar's `Parser`) and every member is checked
 * before anything is written: absolute paths, `..` components, drive letters, links (symbolic
 * and hard), device files, FIFOs and other non-regular types reject the whole archive. Limits on
 * archive size, expanded size, expansion ratio, member count and member size stop bombs early.
 * Regular files are written by this module (not by node-tar) into a fresh temp directory, each
 * path re-checked to lie inside it, with exclusive-create so nothing is ever overwritten.
 */
import { createReadStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, openSync, readSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, isAbsolute, join, resolve, sep } from 'node:path';
import { createGunzip } from 'node:zlib';
import { Parser, type ReadEntry } from 'tar';

/** Limits of {@link unpackSource}. */
export interface ArchiveLimits {
  /** Max size of the archive file itself (default 200 MiB). */
  maxArchiveBytes: number;
  /** Max total bytes after decompression (default 1 GiB). */
  maxExpandedBytes: number;
  /** Max expanded/compressed ratio, checked once more than 1 MiB has been expanded (default 200). */
  maxRatio: number;
  /** Max number of members (default 5000). */
  maxFiles: number;
  /** Max size of one member (default 200 MiB). */
  maxFileBytes: number;
}

export const DEFAULT_LIMITS: ArchiveLimits = {
  maxArchiveBytes: 200 * 2 ** 20,
  maxExpandedBytes: 2 ** 30,
  maxRatio: 200,
  maxFiles: 5000,
  maxFileBytes: 200 * 2 ** 20,
};

/** Raised for refused archives; `code` says why. */
export class ArchiveError extends Error {
  constructor(
    message: string,
    readonly code: 'absolute-path' | 'path-traversal' | 'link' | 'device' | 'unsupported-type' | 'too-large' | 'ratio' | 'too-many-files' | 'corrupt' | 'not-found' | 'no-latex',
  ) {
    super(message);
    this.name = 'ArchiveError';
  }
}

/** An unpacked (or in-place) paper source. Call `cleanup()` when done. */
export interface UnpackedSource {
  /** Directory holding the source files. */
  root: string;
  /** Whether `root` is a temp dir created here (removed by cleanup). */
  temporary: boolean;
  /** Relative paths of the regular files written (empty for directory input). */
  files: string[];
  cleanup(): void;
}

/** What some bytes are: gzip, tar (ustar magic or a valid v7 header checksum), PDF, zip, TeX text, other text, binary, or nothing. */
export type ContentKind = 'gzip' | 'tar' | 'pdf' | 'zip' | 'tex' | 'text' | 'binary' | 'empty';

const TEX_MARKERS = /\\(documentclass|documentstyle|begin\s*\{|section|chapter|input|include|usepackage|newcommand|def\\|title|author|maketitle|bibliography)/;

/** Sniff the first bytes of a source (512 or more for tar detection). */
export function sniffContent(head: Uint8Array): ContentKind {
  const b = Buffer.from(head.buffer, head.byteOffset, head.byteLength);
  if (b.length === 0) return 'empty';
  if (b.length >= 2 && b[0] === 0x1f && b[1] === 0x8b) return 'gzip';
  if (b.length >= 5 && b.toString('latin1', 0, 5) === '%PDF-') return 'pdf';
  if (b.length >= 4 && b[0] === 0x50 && b[1] === 0x4b && b[2] === 0x03 && b[3] === 0x04) return 'zip';
  if (isTarHeader(b)) return 'tar';
  const n = Math.min(b.length, 8192);
  let bad = 0;
  for (let i = 0; i < n; i++) {
    const c = b[i];
    if (c === 0) return 'binary';
    if (c < 7 || (c > 13 && c < 32 && c !== 27)) bad++;
  }
  if (bad / n > 0.1) return 'binary';
  return TEX_MARKERS.test(b.toString('latin1', 0, n)) ? 'tex' : 'text';
}

/** A tar header block: ustar magic, or (v7) a checksum field that matches the block. */
export function isTarHeader(b: Buffer): boolean {
  if (b.length < 512) return false;
  if (b.toString('latin1', 257, 262) === 'ustar') return true;
  const field = b.toString('latin1', 148, 156).replace(/[\0 ]+$/, '').trim();
  if (!/^[0-7]{1,7}$/.test(field) || b[0] === 0) return false;
  let sum = 0;
  for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 32 : b[i];
  return sum === parseInt(field, 8);
}

function readHead(path: string, n = 8192): Buffer {
  const fd = openSync(path, 'r');
  try {
    const head = Buffer.alloc(n);
    const got = readSync(fd, head, 0, n, 0);
    return head.subarray(0, got);
  } finally {
    closeSync(fd);
  }
}

/** What a path holds, by content: a directory, or the {@link ContentKind} of its first bytes. */
export function sourceKind(path: string): 'dir' | ContentKind {
  if (statSync(path).isDirectory()) return 'dir';
  return sniffContent(readHead(path));
}

/** The archive kind a file name claims (`.tar.gz`/`.tgz`, `.tar`, `.gz`), or undefined. */
export function archiveNameKind(path: string): 'tar.gz' | 'tar' | 'gz' | undefined {
  if (/\.(tar\.gz|tgz)$/i.test(path)) return 'tar.gz';
  if (/\.tar$/i.test(path)) return 'tar';
  if (/\.gz$/i.test(path)) return 'gz';
  return undefined;
}

/** The error for an archive whose content cannot be read; names the file. */
export function corruptArchive(path: string, detail: string): ArchiveError {
  return new ArchiveError(`corrupt or unreadable archive ${path}: ${detail}`, 'corrupt');
}

/**
 * Check one member path; returns the normalised relative path.
 * @throws ArchiveError for absolute paths, drive letters, `..` components
 */
export function checkMemberPath(p: string): string {
  const raw = p.replace(/\\/g, '/');
  if (raw.startsWith('/') || isAbsolute(p) || /^[a-zA-Z]:/.test(raw)) throw new ArchiveError(`archive member has an absolute path: ${JSON.stringify(p)}`, 'absolute-path');
  const parts = raw.split('/').filter((x) => x !== '' && x !== '.');
  if (parts.some((x) => x === '..')) throw new ArchiveError(`archive member escapes the archive root: ${JSON.stringify(p)}`, 'path-traversal');
  if (parts.some((x) => x.includes('\0'))) throw new ArchiveError(`archive member has a NUL in its path`, 'corrupt');
  return parts.join('/');
}

function checkType(e: ReadEntry): 'file' | 'dir' {
  switch (e.type) {
    case 'File':
    case 'OldFile':
    case 'ContiguousFile':
      return 'file';
    case 'Directory':
    case 'GNUDumpDir':
      return 'dir';
    case 'SymbolicLink':
    case 'Link':
      throw new ArchiveError(`archive member is a ${e.type === 'Link' ? 'hard' : 'symbolic'} link (refused): ${JSON.stringify(e.path)} -> ${JSON.stringify(e.linkpath ?? '')}`, 'link');
    case 'CharacterDevice':
    case 'BlockDevice':
    case 'FIFO':
      throw new ArchiveError(`archive member is a device file or FIFO (refused): ${JSON.stringify(e.path)} (${e.type})`, 'device');
    default:
      throw new ArchiveError(`archive member of unsupported type ${e.type} (refused): ${JSON.stringify(e.path)}`, 'unsupported-type');
  }
}

/**
 * Make `path` usable as a paper root: a directory is used in place; an archive is unpacked into
 * a new temp directory (under `workDir`, default the OS temp dir) with the checks above.
 * @throws ArchiveError (refused or corrupt archive, limits exceeded); the temp dir is removed then
 */
export async function unpackSource(path: string, opts: { workDir?: string; limits?: Partial<ArchiveLimits> } = {}): Promise<UnpackedSource> {
  if (!existsSync(path)) throw new ArchiveError(`paper source not found: ${path}`, 'not-found');
  const limits = { ...DEFAULT_LIMITS, ...opts.limits };
  const kind = sourceKind(path);
  if (kind === 'dir') return { root: resolve(path), temporary: false, files: [], cleanup: () => {} };
  const size = statSync(path).size;
  const claimed = archiveNameKind(path);
  if (kind === 'pdf') throw noLatex(path, 'is a PDF');
  if (kind === 'zip') throw new ArchiveError(`unsupported paper source ${path}: a zip archive (arXiv sources are tar, gzip or TeX)`, 'corrupt');
  if (kind === 'empty') throw claimed ? corruptArchive(path, 'the file is empty') : new ArchiveError(`unsupported paper source (an empty file): ${path}`, 'corrupt');
  if (kind === 'binary' || (kind === 'text' && !/\.tex$/i.test(path))) {
    // The name says archive but the bytes are not one we read: corrupt, not "unsupported".
    if (claimed === 'tar.gz' || claimed === 'gz') throw corruptArchive(path, 'not gzip data (no gzip header)');
    if (claimed === 'tar') throw corruptArchive(path, 'not tar data (no tar header)');
    throw new ArchiveError(`unsupported paper source (not a directory, gzip, tar or TeX file): ${path}`, 'corrupt');
  }
  if (size > limits.maxArchiveBytes) throw new ArchiveError(`archive ${basename(path)} is ${size} bytes, over the limit of ${limits.maxArchiveBytes}`, 'too-large');
  const base = opts.workDir ?? tmpdir();
  mkdirSync(base, { recursive: true });
  const root = mkdtempSync(join(base, 'papergym-src-'));
  const cleanup = () => rmSync(root, { recursive: true, force: true });
  const texName = () => {
    const stem = basename(path).replace(/\.(tar\.gz|tgz|tar|gz)$/i, '') || 'main';
    return /\.tex$/i.test(stem) ? stem : `${stem}.tex`;
  };
  try {
    let files: string[];
    if (kind === 'tex' || kind === 'text') {
      const name = texName();
      writeFileSync(join(root, name), readFileSync(path), { flag: 'wx' });
      files = [name];
    } else if (kind === 'tar') {
      files = await untar(createReadStream(path), root, size, limits, path);
    } else {
      // gzip: a tar inside, or a single file (TeX; a PDF is refused)
      const gz = createGunzip();
      const input = createReadStream(path);
      input.on('error', (e) => gz.destroy(e));
      input.pipe(gz);
      const it = gz[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
      const head: Buffer[] = [];
      let got = 0;
      let done = false;
      try {
        while (got < 8192) {
          const r = await it.next();
          if (r.done) {
            done = true;
            break;
          }
          head.push(r.value);
          got += r.value.length;
          const err = expansionError(got, size, limits);
          if (err) throw err;
        }
      } catch (e) {
        gz.destroy();
        throw e instanceof ArchiveError ? e : corruptArchive(path, `bad gzip data (${(e as Error).message})`);
      }
      const first = Buffer.concat(head);
      const inner = sniffContent(first);
      async function* rest(): AsyncGenerator<Buffer> {
        yield first;
        if (done) return;
        for (;;) {
          const r = await it.next();
          if (r.done) return;
          yield r.value;
        }
      }
      if (inner === 'tar') {
        try {
          files = await untar(rest(), root, size, limits, path);
        } finally {
          gz.destroy();
          input.destroy();
        }
      }
      else if (inner === 'tex' || inner === 'text') {
        const chunks: Buffer[] = [];
        let total = 0;
        try {
          for await (const c of rest()) {
            total += c.length;
            const err = expansionError(total, size, limits) ?? (total > limits.maxFileBytes ? new ArchiveError(`gzipped file ${basename(path)} expands to more than ${limits.maxFileBytes} bytes`, 'too-large') : undefined);
            if (err) throw err;
            chunks.push(c);
          }
        } catch (e) {
          gz.destroy();
          throw e instanceof ArchiveError ? e : corruptArchive(path, `bad gzip data (${(e as Error).message})`);
        }
        const name = texName();
        writeFileSync(join(root, name), Buffer.concat(chunks), { flag: 'wx' });
        files = [name];
      } else {
        gz.destroy();
        if (inner === 'pdf') throw noLatex(path, 'holds a gzipped PDF');
        throw corruptArchive(path, `gzip data holding neither a tar archive nor a TeX file (${inner})`);
      }
    }
    return { root, temporary: true, files, cleanup };
  } catch (e) {
    cleanup();
    throw e;
  }
}

function noLatex(path: string, what: string): ArchiveError {
  return new ArchiveError(`${path} ${what}: no LaTeX sources found (a PDF-only paper cannot be ingested; use its LaTeX source, e.g. arXiv's e-print)`, 'no-latex');
}

function expansionError(total: number, compressed: number, limits: ArchiveLimits): ArchiveError | undefined {
  if (total > limits.maxExpandedBytes) return new ArchiveError(`archive expands to more than ${limits.maxExpandedBytes} bytes (refused)`, 'too-large');
  if (total > 2 ** 20 && total / Math.max(1, compressed) > limits.maxRatio)
    return new ArchiveError(`archive expansion ratio exceeds ${limits.maxRatio}:1 (${total} bytes from ${compressed}; refused as a possible decompression bomb)`, 'ratio');
  return undefined;
}

/** Unpack tar bytes (already decompressed) into `root`, checking every member first (see the module doc). */
async function untar(input: AsyncIterable<Buffer>, root: string, compressed: number, limits: ArchiveLimits, path: string): Promise<string[]> {
  const files: string[] = [];
  let count = 0;
  let expanded = 0;
  const rootReal = resolve(root);
  let failure: Error | undefined;
  const fail = (e: Error) => {
    if (!failure) failure = e;
  };
  const parser = new Parser({ strict: true });
  parser.on('entry', (entry: ReadEntry) => {
    if (failure) return entry.resume();
    try {
      if (++count > limits.maxFiles) throw new ArchiveError(`archive has more than ${limits.maxFiles} members (refused)`, 'too-many-files');
      const kind = checkType(entry);
      const rel = checkMemberPath(entry.path);
      if (!rel) return entry.resume();
      const dest = resolve(rootReal, rel);
      if (dest !== rootReal && !dest.startsWith(rootReal + sep)) throw new ArchiveError(`archive member escapes the archive root: ${JSON.stringify(entry.path)}`, 'path-traversal');
      if (kind === 'dir') {
        mkdirSync(dest, { recursive: true });
        return entry.resume();
      }
      if (entry.size > limits.maxFileBytes) throw new ArchiveError(`archive member ${JSON.stringify(rel)} is ${entry.size} bytes, over the limit of ${limits.maxFileBytes}`, 'too-large');
      const chunks: Buffer[] = [];
      let got = 0;
      entry.on('data', (c: Buffer) => {
        got += c.length;
        if (got > limits.maxFileBytes) return fail(new ArchiveError(`archive member ${JSON.stringify(rel)} exceeds ${limits.maxFileBytes} bytes`, 'too-large'));
        chunks.push(c);
      });
      entry.on('end', () => {
        if (failure) return;
        try {
          mkdirSync(dirname(dest), { recursive: true });
          // 'wx': never overwrite (duplicate member names keep the first copy)
          if (!existsSync(dest)) {
            writeFileSync(dest, Buffer.concat(chunks), { flag: 'wx', mode: 0o644 });
            files.push(rel);
          }
        } catch (e) {
          fail(e as Error);
        }
      });
    } catch (e) {
      entry.resume();
      fail(e as Error);
    }
  });
  parser.on('warn', (code: string, message: string) => {
    if (/TAR_BAD_ARCHIVE|TAR_ENTRY_INVALID|TAR_ABORT/.test(code)) fail(corruptArchive(path, `bad tar data (${message})`));
  });
  parser.on('error', (e: Error) => fail(e instanceof ArchiveError ? e : corruptArchive(path, `bad tar data (${e.message})`)));
  const ended = new Promise<void>((res) => parser.on('end', () => res()));
  try {
    for await (const c of input) {
      expanded += c.length;
      const err = expansionError(expanded, compressed, limits);
      if (err) fail(err);
      if (failure) break;
      parser.write(c);
      if (failure) break;
    }
  } catch (e) {
    fail(e instanceof ArchiveError ? e : corruptArchive(path, `bad gzip data (${(e as Error).message})`));
  }
  if (failure) {
    parser.abort(failure);
    (input as unknown as { destroy?: () => void }).destroy?.();
    throw failure;
  }
  parser.end();
  await ended;
  if (failure) throw failure;
  return files;
}
