// ESLint flat config: @eslint/js and typescript-eslint recommended rules, without type information
// (fast on 2 cores). Run from the repository root with `npm run lint` (scripts/lint.mjs), which also
// runs `prettier --check` and `clang-format --dry-run`; layout is Prettier's, not ESLint's.
// The toolchain lives in tools/lint/ with its own lock file: typescript-eslint needs the TypeScript 5
// compiler API, and the package builds with TypeScript 7, which has no JavaScript API.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'build/**', '**/node_modules/**', 'tools/**', 'native/**', '.cache/**', 'runs/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2023, sourceType: 'module' },
    rules: {
      // `_name` marks a deliberately unused binding (a destructured-away field, a required parameter).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true },
      ],
      // `a && f()` / `c ? f() : g()` as statements are used on purpose (void-returning calls).
      '@typescript-eslint/no-unused-expressions': ['error', { allowShortCircuit: true, allowTernary: true }],
      // `any` only at untyped library boundaries (the Jinja runtime, tokenizers.js): visible, not fatal.
      '@typescript-eslint/no-explicit-any': 'warn',
      // The trainer's stage view closes over the trainer as `t` (getters that read its current state).
      '@typescript-eslint/no-this-alias': ['error', { allowedNames: ['t'] }],
      // `let status = 0; try { status = … } catch { … }`: the initial value documents the catch path's state.
      'no-useless-assignment': 'off',
      // Errors are wrapped with the input they concern named in the message; `cause` chaining is not the house style.
      'preserve-caught-error': 'off',
    },
  },
  // The CommonJS entry loads the ESM build with require().
  { files: ['**/*.cts'], rules: { '@typescript-eslint/no-require-imports': 'off' } },
  // Tests match terminal output (ANSI escapes) with regular expressions; chai's property assertions
  // (`expect(x).to.be.ok`) are expressions.
  { files: ['test/**'], rules: { 'no-control-regex': 'off', '@typescript-eslint/no-unused-expressions': 'off' } },
);
