/**
 * A minimal ustar archive writer for tests: regular files only (mode 0644, uid/gid 0, size in octal,
 * checksum over the header with the checksum field as spaces; POSIX.1-1988 ustar header layout).
 */
export function tarEntry(name: string, data: Buffer): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0, 'utf8');
  h.write('0000644\0', 100);
  h.write('0000000\0', 108);
  h.write('0000000\0', 116);
  h.write(data.length.toString(8).padStart(11, '0') + '\0', 124);
  h.write('00000000000\0', 136);
  h.write('        ', 148);
  h.write('0', 156);
  h.write('ustar\0', 257);
  h.write('00', 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  return Buffer.concat([h, data, Buffer.alloc((512 - (data.length % 512)) % 512)]);
}
/** A tar archive (uncompressed) of `files` (path → text or bytes), ending in the two zero blocks. */
export const tarOf = (files: Record<string, string | Buffer>) =>
  Buffer.concat([...Object.entries(files).map(([n, d]) => tarEntry(n, Buffer.isBuffer(d) ? d : Buffer.from(d))), Buffer.alloc(1024)]);
