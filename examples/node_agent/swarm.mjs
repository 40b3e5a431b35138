// The few swarm commands an agent needs (PROTOCOL.md), on Node's built-in fetch: claim an episode
// (waiting while the engine is not rolling or the pool is empty), end it with a reward, or abort it.
import { randomUUID } from "node:crypto";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class Swarm {
  constructor(serverUrl, { clientUuid = randomUUID(), pollMs = 1000 } = {}) {
    this.serverUrl = serverUrl.replace(/\/+$/, "");
    this.clientUuid = clientUuid;
    this.pollMs = pollMs;
  }

  async post(path, body) {
    const r = await fetch(this.serverUrl + path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
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
        console.error(`claim_episode: ${e.message}; retrying`);
        await sleep(3 * this.pollMs);
        continue;
      }
      if (data.success) {
        return {
          episodeUuid: data.episode_uuid,
          baseURL: data.openai_base_url.replace(/^https?:\/\/[^/]+/, this.serverUrl),
          apiKey: data.openai_api_key,
        };
      }
      // "Engine not ready ..." or "No available episodes ...": wait and try again.
      await sleep(data.fail_cause.startsWith("No available") ? this.pollMs / 2 : this.pollMs);
    }
  }

  async endEpisode(taskId, episodeUuid, reward, extra = {}) {
    try {
      await this.post("/end_episode", {
        client_uuid: this.clientUuid, episode_uuid: episodeUuid, task_id: taskId,
        workflow_output: { reward, metadata: { task_id: taskId }, ...extra },
      });
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
    }).catch((e) => console.error(`abort_episode: ${e.message}`));
  }
}
