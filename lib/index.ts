/** Public entry of papergym-native. */
export * from './native.js';
