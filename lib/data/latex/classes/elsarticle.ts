/** Elsevier, class `elsarticle` (also `cas-sc` / `cas-dc`): abstract and keywords inside `frontmatter`. */
import type { ClassFamily } from './types.js';

export const elsarticle: ClassFamily = {
  name: 'elsarticle',
  classes: ['elsarticle', 'cas-sc', 'cas-dc'],
  boilerplateEnvironments: { acknowledgements: 'Acknowledgements', acknowledgment: 'Acknowledgment' },
  source: 'elsarticle documentation (elsdoc.pdf), §"Frontmatter"',
};
