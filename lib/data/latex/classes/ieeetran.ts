/** IEEE Transactions / conferences, class `IEEEtran`: `\IEEEPARstart{F}{irst}` is the first word. */
import type { ClassFamily } from './types.js';

export const ieeetran: ClassFamily = {
  name: 'ieeetran',
  classes: ['IEEEtran', 'IEEEconf'],
  macros: { IEEEPARstart: { nargs: 2, body: '#1#2' }, IEEEraisesectionheading: { nargs: 1, body: '#1' } },
  source: 'IEEEtran HOWTO (IEEEtran_HOWTO.pdf), §IV "\\IEEEPARstart", §XV "Acknowledgment"',
};
