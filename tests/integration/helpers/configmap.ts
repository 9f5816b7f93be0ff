/**
 * A configuration directory laid out the way kubelet mounts a ConfigMap volume, and the
 * atomic update kubelet performs (control-plane.md §2.1): the file is a stable symlink
 * `flow-aggregator.conf -> ..data/flow-aggregator.conf`, `..data` is a symlink to a timestamped
 * directory, and an update writes a new directory, points `..data_tmp` at it, renames
 * `..data_tmp` over `..data` and deletes the old directory.
 */

/** File name of the configuration inside the volume. */
export const CONF_NAME = "flow-aggregator.conf";

/** A ConfigMap-style volume in a directory. */
export class ConfigMapDir {
  /** The volume directory. */
  readonly dir: string;
  #generation = 0;
  #current = "";

  private constructor(dir: string) {
    this.dir = dir;
  }

  /** Creates the layout in `dir` (which must exist) with `content` as the first version. */
  static async create(dir: string, content: string): Promise<ConfigMapDir> {
    const c = new ConfigMapDir(dir);
    c.#current = await c.#writeVersion(content);
    await Deno.symlink(c.#current, `${dir}/..data`);
    await Deno.symlink(`..data/${CONF_NAME}`, `${dir}/${CONF_NAME}`);
    return c;
  }

  /** Path of the configuration file (the stable symlink). */
  get path(): string {
    return `${this.dir}/${CONF_NAME}`;
  }

  /** Atomically replaces the content, as kubelet does. */
  async update(content: string): Promise<void> {
    const old = this.#current;
    const next = await this.#writeVersion(content);
    await Deno.symlink(next, `${this.dir}/..data_tmp`);
    await Deno.rename(`${this.dir}/..data_tmp`, `${this.dir}/..data`);
    this.#current = next;
    await Deno.remove(`${this.dir}/${old}`, { recursive: true });
  }

  async #writeVersion(content: string): Promise<string> {
    const name = `..2026_12_02_00_00_0${this.#generation++}.${crypto.randomUUID().slice(0, 8)}`;
    await Deno.mkdir(`${this.dir}/${name}`);
    await Deno.writeTextFile(`${this.dir}/${name}/${CONF_NAME}`, content);
    return name;
  }
}
