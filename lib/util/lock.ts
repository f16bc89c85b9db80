/**
 * Exclusive use of a file or directory across processes (issue 38 item 1: a run dir, a build-data
 * state): an OS-level lock that the kernel releases when the holder exits or is killed, so a
 * crashed process never leaves a stale lock behind.
 *
 * How: the lock file (`<target>.lock`, or any path the caller names) is opened as a SQLite database
 * with `locking_mode = EXCLUSIVE` and an open `BEGIN EXCLUSIVE` transaction. SQLite's unix VFS takes
 * that as a POSIX `fcntl()` write lock on the file (sqlite.org/lockingv3.html), which the kernel
 * drops with the process; another process — or another connection in this one — gets SQLITE_BUSY
 * at once (busy timeout 0). No native module beyond the SQLite engine the package already uses
 * (lib/util/sqlite.ts; only `exec` here, no prepared statement, so close() releases the lock at once).
 *
 * The holder's pid cannot be read from a locked SQLite file, so the holder also writes
 * `<lock>.owner` (JSON: pid, host, since, command). That file is only information: the OS lock
 * decides. A stale `.owner` left by a killed process is overwritten by the next holder.
 *
 * Limits (stated honestly): advisory (a process that does not call {@link acquireLock} is not
 * stopped); POSIX locks are unreliable on some network file systems (NFS without lockd).
 */
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname } from 'node:path';
import { openDatabase, type SqliteDatabase } from './sqlite.js';

/** Who holds a lock (the `.owner` file). */
export interface LockOwner {
  pid: number;
  host: string;
  /** ISO 8601 time the lock was taken. */
  since: string;
  /** The holder's command line (argv after node). */
  command: string;
}

/** Error code of a lock held by another process (`err.code`). */
export const LOCK_HELD = 'ERR_PG_LOCKED';

/** Another process holds the lock. `holder` is undefined when its `.owner` file could not be read yet. */
export class LockHeldError extends Error {
  readonly code = LOCK_HELD;
  constructor(
    readonly path: string,
    readonly what: string,
    readonly holder?: LockOwner,
  ) {
    const host = holder && holder.host !== hostname() ? ` on host ${holder.host}` : '';
    super(
      `${what} is in use by ${holder ? `pid ${holder.pid} (${holder.command} since ${holder.since}${host}` : 'another process (its pid is not recorded yet'}; ` +
        `lock file ${path}); the lock is released when that process exits, even if it crashes`,
    );
    this.name = 'LockHeldError';
  }
}

/** A held lock; {@link release} is idempotent. */
export interface Lock {
  /** The lock file. */
  readonly path: string;
  readonly holder: LockOwner;
  release(): void;
}
/** @deprecated alias of {@link Lock}. */
export type HeldLock = Lock;

/** Locks held by this process: keeps their connections reachable (a collected connection would drop the lock). */
const held = new Set<Lock>();

/** Whether a local pid exists (signal 0; EPERM means it exists under another user). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const ownerPath = (lockPath: string) => `${lockPath}.owner`;

/** The recorded holder of a lock file, or undefined (no or unreadable `.owner`). */
export function readLockOwner(lockPath: string): LockOwner | undefined {
  try {
    const o = JSON.parse(readFileSync(ownerPath(lockPath), 'utf8')) as LockOwner;
    return Number.isInteger(o.pid) ? o : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Take the lock at `lockPath` (created with its directory if missing) or fail at once.
 * @param lockPath the lock file, e.g. `<state>.lock` or `<run dir>/.lock`
 * @param what how errors name the locked thing, e.g. `build-data state /x/y.sqlite`
 * @param command what the holder is doing, recorded for the error of the next one (default: this process's argv)
 * @param log told when the lock was last held by a process that died without releasing it
 * @throws LockHeldError (code {@link LOCK_HELD}) when another process (or another acquireLock in this
 *   one) holds it; Error naming `lockPath` when the lock file cannot be created or is not a lock file
 */
export function acquireLock(lockPath: string, what = lockPath, command = process.argv.slice(1).join(' '), log?: (line: string) => void): Lock {
  mkdirSync(dirname(lockPath), { recursive: true });
  let db: SqliteDatabase;
  try {
    db = openDatabase(lockPath);
    db.exec('PRAGMA busy_timeout = 0');
  } catch (e) {
    throw new Error(`${lockPath}: cannot open the lock file of ${what}: ${(e as Error).message}`);
  }
  try {
    db.exec('PRAGMA locking_mode = EXCLUSIVE');
    db.exec('BEGIN EXCLUSIVE');
  } catch (e) {
    db.close();
    const code = (e as { code?: string }).code;
    if (code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED') {
      // the holder writes .owner right after taking the lock: give it a moment when it just started
      let owner = readLockOwner(lockPath);
      const stale = (o?: LockOwner) => !o || (o.host === hostname() && !alive(o.pid));
      for (let k = 0; k < 20 && stale(owner); k++) {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 25);
        owner = readLockOwner(lockPath);
      }
      throw new LockHeldError(lockPath, what, owner);
    }
    throw new Error(`${lockPath}: not usable as the lock file of ${what}: ${(e as Error).message}`);
  }
  const previous = readLockOwner(lockPath);
  if (previous && log)
    log(`${what}: the previous holder, pid ${previous.pid} (${previous.command}), ended without releasing ${lockPath}; the OS had released its lock`);
  const owner: LockOwner = { pid: process.pid, host: hostname(), since: new Date().toISOString(), command: command.slice(0, 400) };
  const tmp = `${ownerPath(lockPath)}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(owner) + '\n');
  renameSync(tmp, ownerPath(lockPath));
  let open = true;
  const lock: Lock = {
    path: lockPath,
    holder: owner,
    release() {
      if (!open) return;
      open = false;
      held.delete(lock);
      // remove .owner first: while the OS lock is still ours nobody else can have written it
      if (readLockOwner(lockPath)?.pid === process.pid) rmSync(ownerPath(lockPath), { force: true });
      try {
        db.exec('ROLLBACK');
      } catch {
        /* nothing to roll back */
      }
      db.close();
    },
  };
  held.add(lock);
  return lock;
}
