/** ACM, class `acmart`: abstract environment before `\maketitle`, `acks` environment printed as "Acknowledgments". */
import type { ClassFamily } from './types.js';

export const acmart: ClassFamily = {
  name: 'acmart',
  classes: ['acmart', 'acmsmall', 'acmlarge', 'acmtog', 'sigconf'],
  boilerplateEnvironments: { acks: 'Acknowledgments' },
  source: 'acmart documentation (acmart.pdf), §2.11 "Acknowledgments"',
};
