/** APS / AIP REVTeX 4.x, class `revtex4-2` (`revtex4-1`, `revtex4`): `acknowledgments` environment printed as a section. */
import type { ClassFamily } from './types.js';

export const revtex: ClassFamily = {
  name: 'revtex',
  classes: ['revtex4-2', 'revtex4-1', 'revtex4', 'aip-cp'],
  boilerplateEnvironments: { acknowledgments: 'Acknowledgments', acknowledgements: 'Acknowledgements' },
  source: 'REVTeX 4.2 author guide (auguide4-2), §V "Acknowledgments"',
};
