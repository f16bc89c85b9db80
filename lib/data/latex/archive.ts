/**
 * Safe unpacking of arXiv-style paper sources (DESIGN.md §7: "archive members with `..` or
 * absolute paths refused"). Accepts a directory (used in place), a `.tar.gz`/`.tgz`, a `.tar`,
 * or a `.gz` holding either a tar or a single TeX file (arXiv ships single-file papers that way).
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
import { Readable } from 'node:stream';
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
    readonly code: 'absolute-path' | 'path-traversal' | 'link' | 'device' | 'unsupported-type' | 'too-large' | 'ratio' | 'too-many-files' | 'corrupt' | 'not-found',
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

/** Archive kind by name and magic bytes ('unknown' when the content matches no kind we read). */
export function sourceKind(path: string): 'dir' | 'tar.gz' | 'tar' | 'gz' | 'tex' | 'unknown' {
  const st = statSync(path);
  if (st.isDirectory()) return 'dir';
  const fd = openSync(path, 'r');
  const head = Buffer.alloc(512);
  const n = readSync(fd, head, 0, 512, 0);
  closeSync(fd);
  if (n >= 2 && head[0] === 0x1f && head[1] === 0x8b) return /\.(tar\.gz|tgz)$/i.test(path) ? 'tar.gz' : 'gz';
  if (n >= 262 && head.toString('latin1', 257, 262) === 'ustar') return 'tar';
  if (/\.tex$/i.test(path)) return 'tex';
  return 'unknown';
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
  let kind = sourceKind(path);
  if (kind === 'dir') return { root: resolve(path), temporary: false, files: [], cleanup: () => {} };
  const size = statSync(path).size;
  if (kind === 'unknown') {
    // The name says archive but the bytes are not one we read: corrupt, not "unsupported".
    const claimed = archiveNameKind(path);
    if (claimed && size === 0) throw corruptArchive(path, 'the file is empty');
    if (claimed === 'tar.gz' || claimed === 'gz') throw corruptArchive(path, 'not gzip data (no gzip header)');
    if (claimed === 'tar') kind = 'tar'; // no ustar magic (e.g. a v7 tar): the tar parser decides
  }
  if (size > limits.maxArchiveBytes) throw new ArchiveError(`archive ${basename(path)} is ${size} bytes, over the limit of ${limits.maxArchiveBytes}`, 'too-large');
  const base = opts.workDir ?? tmpdir();
  mkdirSync(base, { recursive: true });
  const root = mkdtempSync(join(base, 'papergym-src-'));
  const cleanup = () => rmSync(root, { recursive: true, force: true });
  try {
    let files: string[];
    if (kind === 'tex') {
      writeFileSync(join(root, basename(path)), readFileSync(path));
      files = [basename(path)];
    } else if (kind === 'gz') {
      // A gzipped tar without the .tar.gz name, or a single gzipped TeX file.
      const buf = await gunzipLimited(path, size, limits);
      if (buf.length >= 262 && buf.toString('latin1', 257, 262) === 'ustar') files = await untar(bufferStream(buf), root, size, limits, false, path);
      else {
        const name = basename(path).replace(/\.gz$/i, '') || 'main';
        const out = /\.tex$/i.test(name) ? name : `${name}.tex`;
        writeFileSync(join(root, out), buf, { flag: 'wx' });
        files = [out];
      }
    } else if (kind === 'tar.gz' || kind === 'tar') {
      files = await untar(createReadStream(path), root, size, limits, kind === 'tar.gz', path);
    } else {
      throw new ArchiveError(`unsupported paper source (not a directory, .tar, .tar.gz or .gz): ${path}`, 'corrupt');
    }
    return { root, temporary: true, files, cleanup };
  } catch (e) {
    cleanup();
    throw e;
  }
}

function bufferStream(buf: Buffer): NodeJS.ReadableStream {
  return Readable.from([buf]);
}

async function gunzipLimited(path: string, compressed: number, limits: ArchiveLimits): Promise<Buffer> {
  return new Promise<Buffer>((resolveP, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const src = createReadStream(path);
    const gz = createGunzip();
    const fail = (e: Error) => {
      src.destroy();
      gz.destroy();
      reject(e);
    };
    gz.on('data', (c: Buffer) => {
      total += c.length;
      const err = expansionError(total, compressed, limits);
      if (err) return fail(err);
      chunks.push(c);
    });
    gz.on('end', () => resolveP(Buffer.concat(chunks)));
    gz.on('error', (e) => fail(corruptArchive(path, `bad gzip data (${e.message})`)));
    src.on('error', fail);
    src.pipe(gz);
  });
}

function expansionError(total: number, compressed: number, limits: ArchiveLimits): ArchiveError | undefined {
  if (total > limits.maxExpandedBytes) return new ArchiveError(`archive expands to more than ${limits.maxExpandedBytes} bytes (refused)`, 'too-large');
  if (total > 2 ** 20 && total / Math.max(1, compressed) > limits.maxRatio)
    return new ArchiveError(`archive expansion ratio exceeds ${limits.maxRatio}:1 (${total} bytes from ${compressed}; refused as a possible decompression bomb)`, 'ratio');
  return undefined;
}

async function untar(input: NodeJS.ReadableStream, root: string, compressed: number, limits: ArchiveLimits, gzipped: boolean, path: string): Promise<string[]> {
  const files: string[] = [];
  let count = 0;
  let expanded = 0;
  const rootReal = resolve(root);
  return new Promise<string[]>((resolveP, reject) => {
    let failed = false;
    const parser = new Parser({ strict: true });
    const gz = gzipped ? createGunzip() : undefined;
    const fail = (e: Error) => {
      if (failed) return;
      failed = true;
      (input as unknown as { destroy?: () => void }).destroy?.();
      gz?.destroy();
      parser.abort(e);
      reject(e);
    };
    parser.on('entry', (entry: ReadEntry) => {
      if (failed) return entry.resume();
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
          if (failed) return;
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
    parser.on('end', () => {
      if (!failed) resolveP(files);
    });
    const feed = (c: Buffer) => {
      expanded += c.length;
      const err = expansionError(expanded, compressed, limits);
      if (err) return fail(err);
      parser.write(c);
    };
    const src = gz ?? input;
    if (gz) {
      gz.on('error', (e) => fail(corruptArchive(path, `bad gzip data (${e.message})`)));
      input.pipe(gz);
    }
    src.on('data', (c: Buffer) => {
      if (!failed) feed(c);
    });
    src.on('end', () => {
      if (!failed) parser.end();
    });
    (input as unknown as NodeJS.EventEmitter).on('error', (e: Error) => fail(e));
  });
}
