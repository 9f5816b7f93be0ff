/**
 * Kubernetes integration (control-plane.md §2–§4): the API client, publication of the
 * collector's TLS material, the cluster UUID and the Pod store. A process without a cluster
 * runs standalone and loads none of it. Also `set flow-aggregator` (antctl's edit of the
 * configuration's ConfigMap, §2.5).
 *
 * @module
 */

export {
  connectKube,
  type ConnectOptions,
  type KubeApi,
  type KubeClientStats,
  type KubeTarget,
  type KubeTargetOptions,
  type ListPage,
  MalformedAnswer,
  type PodList,
  resolveKubeTarget,
  SERVICE_ACCOUNT_DIR,
  type WatchEvent,
  type WatchHandle,
} from "./client.ts";
export {
  AnswerTooLarge,
  type HttpStats,
  isRedirect,
  MAX_ANSWER_BYTES,
  MAX_LIST_PAGE_BYTES,
  RedirectRefused,
} from "./http.ts";
export {
  CA_CONFIGMAP,
  CA_SECRET,
  CertificatePublisher,
  type CertificateSyncOptions,
  CLIENT_SECRET,
  MAX_PEM_BYTES,
  prepareCertificates,
  type PrepareHooks,
  type PrepareOptions,
  type PrepareSettings,
  type PublisherStats,
} from "./certificates.ts";
export {
  CLUSTER_IDENTITY,
  CLUSTER_UUID_FILE,
  ClusterIdentity,
  type ClusterIdentityOptions,
  type ClusterIdentityStats,
  type ClusterUuidSource,
  isUuid,
  STATE_FILE_MAX_BYTES,
} from "./cluster_uuid.ts";
export {
  DELETED_POD_RETENTION_MS,
  type PodObject,
  PodStore,
  type PodStoreOptions,
  type PodStoreStats,
} from "./pod_store.ts";
export { type Backoff, retrying, type RetryOptions } from "./retry.ts";
export {
  CONFIG_KEY,
  CONFIG_MAP_ENV,
  editConfig,
  parseSetArgs,
  runConfigSet,
  SET_COMMAND,
  SETTABLE_KEYS,
  updateConfigMap,
} from "./config_set.ts";
