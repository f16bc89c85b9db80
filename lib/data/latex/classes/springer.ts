/** Springer: `llncs` (LNCS proceedings), `svjour3` / `svjour2` (journals), `sn-jnl` (Springer Nature): `acknowledgements` environment as a run-in heading. */
import type { ClassFamily } from './types.js';

export const springer: ClassFamily = {
  name: 'springer',
  classes: ['llncs', 'svjour3', 'svjour2', 'svjour', 'sn-jnl', 'svmult'],
  // sn-jnl's unnumbered run-in heading (\bmhead{Acknowledgements}, \bmhead{Supplementary information})
  headings: [{ command: 'bmhead', level: 'paragraph', title: '', form: 'title' }],
  boilerplateEnvironments: { acknowledgements: 'Acknowledgements', acknowledgement: 'Acknowledgement' },
  source: 'Springer LNCS author guidelines (llncs.cls) and svjour3 user guide (usrguid3)',
};
