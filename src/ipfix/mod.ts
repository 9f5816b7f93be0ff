/**
 * IPFIX codec and IE registry: bytes ⇄ typed records (RFC 7011/7012, Antrea v1.13 elements).
 * Pure code: no I/O, no timers (template expiry uses an injected clock).
 */

export * from "./types.ts";
export {
  ALL_ELEMENTS,
  elementByName,
  fieldName,
  fieldsFor,
  lookupElement,
  registerElement,
} from "./registry.ts";
export {
  type CompiledTemplate,
  type RecordsDecoder,
  REFUSALS_REMEMBERED,
  TemplateBudget,
  type TemplateBudgetOptions,
  type TemplateRefusal,
  TemplateStore,
  type TemplateStoreOptions,
} from "./template_store.ts";
export {
  type CompileOptions,
  compileTemplate,
  decoderTier,
  GENERATED_MAX_FIELDS,
  LAYOUT_OVERHEAD_FIELDS,
  MAX_GENERATED_LAYOUTS,
  type PendingTemplates,
  stringsTruncatedTotal,
  TemplateLayouts,
  type TemplateLayoutsOptions,
} from "./compile.ts";
export {
  type DecodedDataSet,
  type DecodedMessage,
  type DecodeErrorReason,
  decodeHeader,
  decodeMessage,
  headerProblem,
  IpfixDecodeError,
  MESSAGE_HEADER_LENGTH,
  RawMessageScratch,
  type RawRecords,
  type RawScratchSet,
  readMessageLength,
  recordCount,
  type RecordDropReason,
  SET_HEADER_LENGTH,
  walkRawMessage,
} from "./decoder.ts";
export {
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  IpfixEncodeError,
  RecordEncoder,
} from "./encoder.ts";
export {
  MessageBuilder,
  type MessageHeaderFields,
  writeMessageHeader,
  writeSetHeader,
} from "./message.ts";
export {
  canonicalIP,
  formatIPv4,
  formatIPv4Bytes,
  formatIPv4Word,
  formatIPv6,
  formatIPv6Words,
  parseIP,
  parseIPv4Word,
  parseIPv6Words,
} from "./ip.ts";
export { fnv1_32 } from "./fnv.ts";
