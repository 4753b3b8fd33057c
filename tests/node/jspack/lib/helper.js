export function helper() { return "from lib"; }
