/**
 * Files in action inputs and outputs. A file travels in JSON as `{"$bytes": <base64>, "name": <name>}`;
 * an output file also says its size and type: `{"$bytes", "name", "bytes", "contentType"}`.
 */

import { readFile } from "node:fs/promises";
import { basename } from "node:path";

/**
 * A file input: bytes (named after its field), a `Blob` (a `File` keeps its name; a `Blob` is named after
 * its field), `{ path }` (the file read, named after it) or `{ name, data }`.
 */
export type FileInput = Uint8Array | Blob | { path: string } | { name: string; data: Uint8Array };

/** A file as the api takes it in an input. */
export interface FileValue {
  $bytes: string;
  name: string;
}

/** A file as the api answers it in an output. */
export interface FileOutput extends FileValue {
  bytes: number;
  contentType: string;
}

/**
 * The JSON value of a file input field.
 *
 * @throws TypeError the value is none of the `FileInput` forms (the message names the field).
 */
export async function fileValue(field: string, value: FileInput): Promise<FileValue> {
  let name: string;
  let data: Uint8Array;
  const fields: Record<string, unknown> = typeof value === "object" && value !== null ? { ...value } : {};
  if (value instanceof Uint8Array) {
    [name, data] = [field, value];
  } else if (value instanceof Blob) {
    [name, data] = [value instanceof File ? value.name : field, new Uint8Array(await value.arrayBuffer())];
  } else if (typeof fields["path"] === "string") {
    [name, data] = [basename(fields["path"]), await readFile(fields["path"])];
  } else if (typeof fields["name"] === "string" && fields["data"] instanceof Uint8Array) {
    [name, data] = [fields["name"], fields["data"]];
  } else {
    const what =
      typeof value === "object" && value !== null
        ? `an object with ${JSON.stringify(Object.keys(value))}`
        : typeof value;
    throw new TypeError(
      `files[${JSON.stringify(field)}] must be a Uint8Array, a Blob, { path } or { name, data }, not ${what}`,
    );
  }
  return { $bytes: Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64"), name };
}

/** The bytes of a file of an answer (`answer.output.file`). */
export function fileBytes(file: { $bytes: string }): Uint8Array {
  return new Uint8Array(Buffer.from(file.$bytes, "base64"));
}
