import assert from "node:assert/strict";
import { flowTemplateProblem } from "../../src/record/flow_input.ts";
import { AGENT_IPV4_FIELDS, AGENT_IPV6_FIELDS } from "../../src/record/schema.ts";
import { fieldsFor } from "../../src/ipfix/mod.ts";

Deno.test("flow input: the Agent templates (IPv4 and IPv6) are flow input", () => {
  assert.equal(flowTemplateProblem(fieldsFor(AGENT_IPV4_FIELDS)), undefined);
  assert.equal(flowTemplateProblem(fieldsFor(AGENT_IPV6_FIELDS)), undefined);
  // A plain IANA 5-tuple template (softflowd's) is flow input too.
  assert.equal(
    flowTemplateProblem(fieldsFor([
      "sourceIPv4Address",
      "destinationIPv4Address",
      "protocolIdentifier",
      "sourceTransportPort",
      "destinationTransportPort",
      "octetDeltaCount",
    ])),
    undefined,
  );
});

Deno.test("flow input: a template without the flow key is not, and says what is missing", () => {
  assert.equal(
    flowTemplateProblem(fieldsFor(["sourceIPv4Address", "destinationIPv4Address"])),
    "no protocolIdentifier, sourceTransportPort, destinationTransportPort",
  );
  assert.equal(
    flowTemplateProblem(fieldsFor([
      "sourceIPv4Address",
      "destinationIPv6Address",
      "protocolIdentifier",
      "sourceTransportPort",
      "destinationTransportPort",
    ])),
    "no source and destination address of one family",
  );
  // Unknown elements (kept as raw bytes) do not count as the key.
  assert.equal(
    flowTemplateProblem([{ id: 9999, enterprise: 12345, length: 4 }]),
    "no protocolIdentifier, sourceTransportPort, destinationTransportPort",
  );
});
