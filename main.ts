/**
 * flow-aggregator entry point (placeholder until the CLI lands): prints the version.
 */
import denoJson from "./deno.json" with { type: "json" };

if (import.meta.main) {
  console.log(`flow-aggregator ${denoJson.version}`);
}
