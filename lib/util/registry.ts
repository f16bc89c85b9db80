/**
 * One registry per extension point (judge backends, training stages, benchmark protocols, dataset
 * formats): descriptors keyed by a name, in registration order, looked up with an error that names
 * the extension point and the registered names. An extension is one descriptor file and one
 * `register(...)` line in its registry module (docs/design.md "Extending").
 */

/** Descriptors of one extension point keyed by `keyOf(descriptor)`; insertion-ordered. */
export class Registry<T> {
  private readonly entries = new Map<string, T>();

  /**
   * @param what the extension point in words ("judge backend"), used in errors.
   * @param keyOf the descriptor's name (its `kind`, `name`, …).
   */
  constructor(
    readonly what: string,
    private readonly keyOf: (d: T) => string,
  ) {}

  /** Adds descriptors; returns this (chainable). @throws Error when a name is registered twice or is empty. */
  register(...ds: T[]): this {
    for (const d of ds) {
      const k = this.keyOf(d);
      if (typeof k !== 'string' || !k) throw new Error(`${this.what} registry: a descriptor without a name (${JSON.stringify(k)})`);
      if (this.entries.has(k)) throw new Error(`${this.what} registry: '${k}' is registered twice`);
      this.entries.set(k, d);
    }
    return this;
  }

  /** The descriptor named `key`. @throws Error naming `where` (a flag, a file) and the registered names when there is none. */
  get(key: string, where?: string): T {
    const d = this.entries.get(key);
    if (d === undefined)
      throw new Error(`${where ? `${where}: ` : ''}unknown ${this.what} ${JSON.stringify(key)} (registered: ${this.names().join(', ') || 'none'})`);
    return d;
  }

  /** The descriptor named `key`, or undefined. */
  find(key: string): T | undefined {
    return this.entries.get(key);
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** Registered names in registration order. */
  names(): string[] {
    return [...this.entries.keys()];
  }

  /** Registered descriptors in registration order. */
  values(): T[] {
    return [...this.entries.values()];
  }

  /** Removes `key` (tests that register a fake descriptor remove it again). Returns whether it was there. */
  unregister(key: string): boolean {
    return this.entries.delete(key);
  }
}
