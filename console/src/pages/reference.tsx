/**
 * API reference: the coordinator's OpenAPI document (GET /v1/openapi.json) as a page: each operation
 * with its parameters, request body and responses, and the schemas they name. Rendered from the JSON
 * as text; nothing in the document is parsed as HTML (descriptions stay plain text).
 */
import type { ComponentChildren } from "preact";
import { ApiFailure, api } from "../api.ts";
import { ErrorNote, Loaded, useLoad } from "../ui.tsx";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = { [key: string]: Json };

const METHODS = ["get", "post", "put", "patch", "delete"];
const isObj = (v: Json | undefined): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const str = (v: Json | undefined): string => (typeof v === "string" ? v : "");
const anchor = (name: string) => `schema-${name.replace(/[^A-Za-z0-9_-]/g, "-")}`;

/** A schema's type in a few words: `string`, `array of Message`, `Message` (a link), `one of …`. */
function typeOf(schema: Json | undefined): ComponentChildren {
  if (!isObj(schema)) return "any";
  const ref = str(schema.$ref);
  if (ref !== "") {
    const name = ref.split("/").pop() ?? ref;
    return <a href={`#${anchor(name)}`}>{name}</a>;
  }
  for (const key of ["oneOf", "anyOf", "allOf"]) {
    const list = schema[key];
    if (Array.isArray(list)) {
      const word = key === "allOf" ? "all of" : "one of";
      return (
        <>
          {word}{" "}
          {list.map((s, i) => (
            <>
              {i > 0 ? " | " : ""}
              {typeOf(s)}
            </>
          ))}
        </>
      );
    }
  }
  if (Array.isArray(schema.enum)) return `one of ${schema.enum.map((v) => JSON.stringify(v)).join(", ")}`;
  const type = Array.isArray(schema.type) ? schema.type.join(" or ") : str(schema.type);
  if (type === "array") return <>array of {typeOf(schema.items)}</>;
  return type === "" ? "object" : type;
}

function Properties({ schema }: { schema: Json | undefined }) {
  if (!isObj(schema) || !isObj(schema.properties)) return <p>Type: {typeOf(schema)}</p>;
  const required = new Set(Array.isArray(schema.required) ? schema.required.map(str) : []);
  return (
    <table>
      <thead>
        <tr>
          <th scope="col">Field</th>
          <th scope="col">Type</th>
          <th scope="col">Required</th>
          <th scope="col">Description</th>
        </tr>
      </thead>
      <tbody>
        {Object.entries(schema.properties).map(([name, prop]) => (
          <tr key={name}>
            <th scope="row">
              <code>{name}</code>
            </th>
            <td>{typeOf(prop)}</td>
            <td>{required.has(name) ? "yes" : "no"}</td>
            <td>{isObj(prop) ? str(prop.description) : ""}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** The JSON schema of a requestBody or response (its application/json content), if any. */
function jsonSchema(part: Json | undefined): Json | undefined {
  if (!isObj(part) || !isObj(part.content)) return undefined;
  const json = part.content["application/json"] ?? Object.values(part.content)[0];
  return isObj(json) ? json.schema : undefined;
}

function Operation({ method, path, op }: { method: string; path: string; op: Obj }) {
  const params = Array.isArray(op.parameters) ? op.parameters.filter(isObj) : [];
  const responses = isObj(op.responses) ? Object.entries(op.responses) : [];
  return (
    <section class="operation" aria-label={`${method.toUpperCase()} ${path}`}>
      <h3>
        <span class="method">{method.toUpperCase()}</span> <code>{path}</code>
      </h3>
      {str(op.summary) !== "" && <p>{str(op.summary)}</p>}
      {str(op.description) !== "" && <p class="description">{str(op.description)}</p>}
      {params.length > 0 && (
        <table>
          <caption>Parameters</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">In</th>
              <th scope="col">Type</th>
              <th scope="col">Required</th>
              <th scope="col">Description</th>
            </tr>
          </thead>
          <tbody>
            {params.map((p) => (
              <tr key={`${str(p.in)}:${str(p.name)}`}>
                <th scope="row">
                  <code>{str(p.name)}</code>
                </th>
                <td>{str(p.in)}</td>
                <td>{typeOf(p.schema)}</td>
                <td>{p.required === true ? "yes" : "no"}</td>
                <td>{str(p.description)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {isObj(op.requestBody) && (
        <>
          <h4>Request body</h4>
          <Properties schema={jsonSchema(op.requestBody)} />
        </>
      )}
      <h4>Responses</h4>
      <ul>
        {responses.map(([status, r]) => (
          <li key={status}>
            <strong>{status}</strong> {isObj(r) ? str(r.description) : ""}
            {jsonSchema(r) !== undefined && <> — {typeOf(jsonSchema(r))}</>}
          </li>
        ))}
      </ul>
    </section>
  );
}

function Reference({ doc }: { doc: Obj }) {
  const info = isObj(doc.info) ? doc.info : {};
  const paths = isObj(doc.paths) ? Object.entries(doc.paths) : [];
  const schemas = isObj(doc.components) && isObj(doc.components.schemas) ? Object.entries(doc.components.schemas) : [];
  return (
    <>
      <p>
        {str(info.title)} {str(info.version) !== "" && `version ${str(info.version)}`} (OpenAPI {str(doc.openapi)})
      </p>
      {str(info.description) !== "" && <p class="description">{str(info.description)}</p>}
      <p>
        The document itself: <a href="/v1/openapi.json">/v1/openapi.json</a>
      </p>
      <h2>Operations</h2>
      {paths.flatMap(([path, item]) =>
        isObj(item)
          ? METHODS.filter((m) => isObj(item[m])).map((m) => <Operation key={`${m} ${path}`} method={m} path={path} op={item[m] as Obj} />)
          : [],
      )}
      {schemas.length > 0 && <h2>Schemas</h2>}
      {schemas.map(([name, schema]) => (
        <section key={name} id={anchor(name)} aria-label={`Schema ${name}`}>
          <h3>{name}</h3>
          {isObj(schema) && str(schema.description) !== "" && <p class="description">{str(schema.description)}</p>}
          <Properties schema={schema} />
        </section>
      ))}
    </>
  );
}

export function ReferencePage() {
  const [load, reload] = useLoad(async () => {
    try {
      return await api<Json>("/v1/openapi.json");
    } catch (e) {
      if (e instanceof ApiFailure && e.status === 404)
        throw new ApiFailure(
          404,
          "not_found",
          "this coordinator does not publish its API document (GET /v1/openapi.json answered 404). docs/api.md in the Umbra repository describes the API",
        );
      throw e;
    }
  }, "openapi");
  return (
    <Loaded load={load} what="the API reference" retry={reload}>
      {(doc) =>
        isObj(doc) ? <Reference doc={doc} /> : <ErrorNote message="The API document is not an OpenAPI object. Tell your operator." />
      }
    </Loaded>
  );
}
