// Resolves `weir:operator/log@0.2.0` to a stub module (see register.mjs).
export async function resolve(specifier, context, next) {
  if (specifier === 'weir:operator/log@0.2.0') {
    return { url: new URL('./log-stub.mjs', import.meta.url).href, shortCircuit: true };
  }
  if (specifier === 'weir-operator') {
    return { url: new URL('../index.js', import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
