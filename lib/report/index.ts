/** Run reports: reading run dirs, the plots, and the self-contained HTML writer. */
export * from './read.js';
export * from './plots.js';
export * from './charts.js';
export * from './html.js';
