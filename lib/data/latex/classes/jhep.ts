/** JHEP / JCAP (SISSA), package `jheppub` / `jcappub` on `article`: `\abstract{…}` in the preamble, `acknowledgments` environment. */
import type { ClassFamily } from './types.js';

export const jhep: ClassFamily = {
  name: 'jhep',
  classes: ['JHEP', 'JCAP'],
  packages: ['jheppub', 'jcappub'],
  boilerplateEnvironments: { acknowledgments: 'Acknowledgments' },
  source: 'SISSA jheppub.sty / jcappub.sty template (https://jhep.sissa.it/jhep/help/JHEP_TeXclass.jsp)',
};
