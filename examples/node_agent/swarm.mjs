// The few swarm commands an agent needs (docs/protocol.md), on Node's built-in fetch: claim an episode
// (waiting while the engine is not rolling or the pool is empty, and saying why on stderr), end it with
// a reward, or abort it. Ending and aborting send the episode's key (the claim's api key): the server
// binds those commands to the episode.
import { randomUUID } from "node:crypto";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class Swarm {
  // reportMs: a wait that goes on says why (on stderr) when the reason changes and at least this often.
  constructor(serverUrl, { clientUuid = randomUUID(), pollMs = 1000, reportMs = 5000 } = {}) {
    this.serverUrl = serverUrl.replace(/\/+$/, "");
    this.clientUuid = clientUuid;
    this.pollMs = pollMs;
    this.reportMs = reportMs;
    this.lastReport = { reason: "", at: 0 };
    this.keys = new Map(); // episodeUuid -> its key, until it is ended or aborted
  }

  // Never wait silently: one stderr line per new reason, then one every reportMs while it lasts.
  reportWait(reason) {
    const now = Date.now();
    if (reason === this.lastReport.reason && now - this.lastReport.at < this.reportMs) return;
    this.lastReport = { reason, at: now };
    console.error(reason);
  }

  async post(path, body, key = "") {
    const headers = { "Content-Type": "application/json" };
    if (key) headers.Authorization = `Bearer ${key}`;
    const r = await fetch(this.serverUrl + path, { method: "POST", headers, body: JSON.stringify(body) });
    const data = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(`${path} (${r.status}): ${data?.error?.message ?? JSON.stringify(data)}`);
    return data;
  }

  // -> {episodeUuid, baseURL, apiKey}; baseURL's host is the one we dialled (NAT-safe).
  async claimEpisode({ discardEpisodeTimeout = 240, episodeType = "train" } = {}) {
    for (;;) {
      let data;
      try {
        data = await this.post("/claim_episode", {
          client_uuid: this.clientUuid, episode_type: episodeType, discard_episode_timeout: discardEpisodeTimeout,
        });
      } catch (e) {
        this.reportWait(`waiting for the swarm server at ${this.serverUrl}: ${e.cause?.code ?? e.cause?.message ?? e.message}`);
        await sleep(3 * this.pollMs);
        continue;
      }
      if (data.success) {
        this.keys.set(data.episode_uuid, data.openai_api_key);
        return {
          episodeUuid: data.episode_uuid,
          baseURL: data.openai_base_url.replace(/^https?:\/\/[^/]+/, this.serverUrl),
          apiKey: data.openai_api_key,
        };
      }
      // "Engine not ready. Current status: [ENGINE.X] ..." or "No available episodes ...": wait and try again.
      const status = /\[(ENGINE\.[A-Z_]+)\]/.exec(data.fail_cause)?.[1];
      const emptyPool = data.fail_cause.startsWith("No available");
      this.reportWait(status ? `waiting for the engine: status ${status}, an episode can be claimed in ENGINE.ROLLING` +
        (status === "ENGINE.OFFLINE" ? " (no engine started yet: POST /start_engine, or python3 -m ajet_swarm start)" : "")
        : emptyPool ? `waiting for a free episode: ${data.fail_cause}` : `claim_episode: ${data.fail_cause}; retrying`);
      await sleep(emptyPool ? this.pollMs / 2 : this.pollMs);
    }
  }

  async endEpisode(taskId, episodeUuid, reward, extra = {}) {
    try {
      await this.post("/end_episode", {
        client_uuid: this.clientUuid, episode_uuid: episodeUuid, task_id: taskId,
        workflow_output: { reward, metadata: { task_id: taskId }, ...extra },
      }, this.keys.get(episodeUuid));
      this.keys.delete(episodeUuid);
      return true;
    } catch (e) {
      if (e.message.includes("WEIGHT_SYNCING")) return false; // a batch boundary passed us: dropped
      throw e;
    }
  }

  async abortEpisode(episodeUuid) {
    await this.post("/abort_episode", {
      client_uuid: this.clientUuid, episode_uuid: episodeUuid, task_id: "",
      workflow_output: { reward: 0, metadata: { task_id: "" } },
    }, this.keys.get(episodeUuid)).catch((e) => console.error(`abort_episode: ${e.message}`));
    this.keys.delete(episodeUuid);
  }
}
