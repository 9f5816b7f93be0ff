/**
 * Antrea-Agent traffic generator: a seeded flow model (scenario mix of ipfix.md §6.4), a paced
 * sender that speaks IPFIX like v1.13 Agents over UDP, TCP or mutual TLS, and a capture server
 * used as a test collector. `scripts/flowgen.ts` is the command line around it.
 *
 * @module
 */

export {
  type Agent,
  agentObservationDomainId,
  type AgentRecord,
  type AgentUpdate,
  DEFAULT_MIX,
  FlowModel,
  type FlowModelOptions,
  type FlowRef,
  type Scenario,
  SCENARIOS,
} from "./model.ts";
export {
  agentDataMessage,
  AgentMessageEncoder,
  agentTemplateMessage,
  type FlowgenOptions,
  type FlowgenReport,
  formatReport,
  runFlowgen,
} from "./sender.ts";
export {
  type CapturedMessage,
  type CapturedRecord,
  type CaptureOptions,
  CaptureServer,
} from "./capture.ts";
export { syntheticAggregate } from "./aggregate.ts";
