/** Copernicus Publications (EGU journals: ACP, GMD, HESS, TC, …), class `copernicus`. */
import type { ClassFamily } from './types.js';

const statement = (command: string, title: string) => ({ command, level: 'section' as const, title, form: 'statement' as const, starred: true });

export const copernicus: ClassFamily = {
  name: 'copernicus',
  classes: ['copernicus', 'copernicus2', 'copernicus_discussions'],
  headings: [
    { command: 'introduction', level: 'section', title: 'Introduction', form: 'heading' },
    { command: 'conclusions', level: 'section', title: 'Conclusions', form: 'heading' },
    statement('codeavailability', 'Code availability'),
    statement('dataavailability', 'Data availability'),
    statement('codedataavailability', 'Code and data availability'),
    statement('sampleavailability', 'Sample availability'),
    statement('videosupplement', 'Video supplement'),
    statement('authorcontribution', 'Author contributions'),
    statement('competinginterests', 'Competing interests'),
    statement('disclaimer', 'Disclaimer'),
    statement('teamlist', 'Team list'),
  ],
  boilerplateEnvironments: { acknowledgements: 'Acknowledgements' },
  source: 'Copernicus Publications LaTeX template, template.tex and copernicus.cls (https://publications.copernicus.org/for_authors/manuscript_preparation.html)',
};
