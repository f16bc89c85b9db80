/** Astronomy & Astrophysics, class `aa`: the structured five-part abstract. */
import type { ClassFamily } from './types.js';

export const aanda: ClassFamily = {
  name: 'aanda',
  classes: ['aa'],
  abstract: { command: 'abstract', parts: ['Context.', 'Aims.', 'Methods.', 'Results.', 'Conclusions.'] },
  boilerplateEnvironments: { acknowledgements: 'Acknowledgements' },
  source: 'A&A author guide, aa.cls documentation (aa.dem): \\abstract{context}{aims}{methods}{results}{conclusions}',
};
