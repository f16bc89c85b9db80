/**
 * Corpus shape for the paper's data experiments (issue 39): papers or items drawn to a domain mix
 * (the paper's corpus is about 50% computer science, 25% physics, 25% economics) and nested subsets
 * for the data-scaling curve (Figure 3: 0.5k → 15k training items), both reproducible from a seed.
 *
 * A paper's domain: a `--domains` TSV when given (columns `file` / `paper_id` / `id` and `domain` /
 * `field` / `category`; arXiv primary categories such as `hep-th` or `cs.LG` are mapped to their
 * archive's domain; /work/shared/papers/corpus/MANIFEST.tsv has this shape), else the prefix of its
 * id (file name: `cs-…`, `physics-…`, `econ-…`, as the LaTeX loader guesses it). Items carry it in
 * `source.domain`.
 *
 * One order serves every size: each domain's members are shuffled by sha256(seed, id); the order then
 * takes, at each position t, the domain whose share lags its target most (largest f_d·(t+1) − count_d,
 * ties to the domain named first), so every prefix is within one member of the target per domain and
 * a subset of size N is the first N — each subset contains the smaller ones. The order stops when the
 * domain it needs next has no member left (it is named as the limit), so no prefix drifts off the mix.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { DOMAINS } from './latex/index.js';

/** One domain's target share (normalised: the shares sum to 1). */
export interface MixTarget {
  /** As written in the spec (`cs`). */
  key: string;
  /** Target fraction in (0, 1]. */
  share: number;
}

/**
 * Parse `cs=0.5,physics=0.25,economics=0.25` (shares are normalised to sum 1; `cs=2,physics=1,…` works).
 * @throws Error naming `flag` for a malformed entry, a share that is not a positive number, or a repeated domain
 */
export function parseDomainMix(spec: string, flag = '--domain-mix'): MixTarget[] {
  const out: MixTarget[] = [];
  for (const part of spec.split(',').map((x) => x.trim()).filter(Boolean)) {
    const m = /^([^=]+)=\s*([0-9.eE+-]+)$/.exec(part);
    const share = m ? Number(m[2]) : NaN;
    if (!m || !Number.isFinite(share) || share <= 0) throw new Error(`${flag}: "${part}" is not DOMAIN=SHARE with a positive share (e.g. cs=0.5,physics=0.25,economics=0.25)`);
    const key = m[1].trim().toLowerCase();
    if (out.some((t) => t.key === key)) throw new Error(`${flag}: domain ${key} given twice`);
    out.push({ key, share });
  }
  if (!out.length) throw new Error(`${flag}: no DOMAIN=SHARE entries in "${spec}"`);
  const sum = out.reduce((a, t) => a + t.share, 0);
  return out.map((t) => ({ key: t.key, share: t.share / sum }));
}

/** arXiv archives whose papers are physics (arxiv.org/category_taxonomy). */
const PHYSICS_ARCHIVES = new Set(['physics', 'hep-th', 'hep-ph', 'hep-ex', 'hep-lat', 'cond-mat', 'quant-ph', 'gr-qc', 'nucl-th', 'nucl-ex', 'math-ph', 'nlin']);

/**
 * A domain name as the mix compares it: lower case, a parenthesised or `/` qualifier dropped
 * (`physics (quantum optimal control)` → `physics`), an arXiv category mapped to its archive's domain
 * (`cs.LG` → `computer science`, `hep-th` → `physics`, `econ.EM` → `economics`, `astro-ph.GA` → `astrophysics`).
 */
export function normaliseDomain(d: string): string {
  const t = d.toLowerCase().replace(/\s*[(/].*$/, '').trim();
  const archive = /^([a-z-]+)(\.[a-z]{2})?$/i.exec(t)?.[1];
  if (archive && t !== archive.replace(/-/g, ' ')) {
    if (PHYSICS_ARCHIVES.has(archive)) return 'physics';
    if (DOMAINS[archive]) return DOMAINS[archive];
  }
  return t;
}

/** Whether a mix key (`cs`, `physics`, `computer science`) names domain `d`. */
export function domainMatches(key: string, d: string): boolean {
  const n = normaliseDomain(d);
  const k = key.toLowerCase();
  return n === k || n === DOMAINS[k] || n === normaliseDomain(k);
}

/**
 * Read a domains TSV (header row; a key column `file` | `paper_id` | `id` and a domain column
 * `domain` | `field` | `category`). Keys are matched by file name and by paper id (the file name
 * without archive extensions). Invalid UTF-8 is warned about (naming the file), not refused.
 * @throws Error naming the file when a column is missing
 */
export function readDomainsTsv(path: string, warn: (m: string) => void = () => {}): Map<string, string> {
  const text = decodeUtf8(readFileSync(path), path, warn);
  const lines = text.split(/\r?\n/).filter((l) => l.trim() && !l.startsWith('#'));
  const head = (lines.shift() ?? '').split('\t').map((h) => h.trim().toLowerCase());
  const ki = head.findIndex((h) => ['file', 'paper_id', 'id'].includes(h));
  const di = head.findIndex((h) => ['domain', 'field', 'category', 'primary_category'].includes(h));
  if (ki < 0 || di < 0) throw new Error(`${path}: a domains TSV needs a header with a file / paper_id / id column and a domain / field / category column (got: ${head.join(', ')})`);
  const out = new Map<string, string>();
  lines.forEach((l) => {
    const cols = l.split('\t');
    const k = cols[ki]?.trim();
    const d = cols[di]?.trim();
    if (k && d) {
      out.set(k, d);
      out.set(k.replace(/\.(tar\.gz|tgz|tar|gz|tex|pdf)$/i, ''), d);
    }
  });
  return out;
}

/** Decode UTF-8; invalid bytes become U+FFFD with a warning naming the file and the first bad line. */
export function decodeUtf8(buf: Buffer, file: string, warn: (m: string) => void): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(buf);
  } catch {
    const text = buf.toString('utf8');
    const lines = text.split('\n');
    const bad = lines.map((l, i) => (l.includes('\uFFFD') ? i + 1 : 0)).filter(Boolean);
    warn(`${file}: not valid UTF-8 (${bad.length} line(s), first line ${bad[0]}); invalid bytes read as U+FFFD`);
    return text;
  }
}

/** The key a member is shuffled by within its domain. */
const rank = (seed: string, id: string) => createHash('sha256').update(`${seed}\u0000${id}`).digest('hex');

/** Result of {@link mixOrder}. */
export interface MixOrder<T> {
  order: T[];
  /** The domain (mix key) that ran out first and ended the order, if any. */
  limitedBy?: string;
  /** Members in no domain of the mix (left out). */
  outside: number;
  /** Members available per mix key. */
  available: Record<string, number>;
}

/**
 * The seeded order of `members` (see the module docs). Without a mix: all members shuffled by seed.
 * @param idOf a stable id per member (paper id, item id)
 * @param domainOf the member's domain
 */
export function mixOrder<T>(members: readonly T[], idOf: (m: T) => string, domainOf: (m: T) => string, mix: MixTarget[] | undefined, seed: string): MixOrder<T> {
  const shuffle = (xs: T[]) => xs.map((m) => ({ m, r: rank(seed, idOf(m)) })).sort((a, b) => (a.r < b.r ? -1 : a.r > b.r ? 1 : 0)).map((x) => x.m);
  if (!mix) return { order: shuffle([...members]), outside: 0, available: {} };
  const pools = mix.map((t) => shuffle(members.filter((m) => domainMatches(t.key, domainOf(m)))));
  const inMix = new Set(pools.flat());
  const available = Object.fromEntries(mix.map((t, i) => [t.key, pools[i].length]));
  const taken = mix.map(() => 0);
  const order: T[] = [];
  for (let t = 0; ; t++) {
    let best = 0;
    let gap = -Infinity;
    mix.forEach((d, i) => {
      const g = d.share * (t + 1) - taken[i];
      if (g > gap + 1e-12) {
        gap = g;
        best = i;
      }
    });
    if (taken[best] >= pools[best].length) return { order, limitedBy: mix[best].key, outside: members.length - inMix.size, available };
    order.push(pools[best][taken[best]++]);
  }
}

/** Counts and shares per mix key (in the mix's order; `other` for the rest) of a drawn set (normalised domains when no mix). */
export function achievedMix<T>(drawn: readonly T[], domainOf: (m: T) => string, mix?: MixTarget[]): Record<string, { count: number; share: number }> {
  const out: Record<string, { count: number; share: number }> = {};
  for (const t of mix ?? []) out[t.key] = { count: 0, share: 0 };
  const keyOf = (m: T) => (mix ? (mix.find((t) => domainMatches(t.key, domainOf(m)))?.key ?? 'other') : normaliseDomain(domainOf(m)));
  for (const m of drawn) (out[keyOf(m)] ??= { count: 0, share: 0 }).count++;
  for (const v of Object.values(out)) v.share = drawn.length ? v.count / drawn.length : 0;
  return out;
}

/** `cs 10 (0.50), physics 5 (0.25)` */
export function formatMix(m: Record<string, { count: number; share: number }>): string {
  return Object.entries(m).map(([k, v]) => `${k} ${v.count} (${v.share.toFixed(2)})`).join(', ');
}
