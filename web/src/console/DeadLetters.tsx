// Dead letters: the runs no worker could finish within their attempts, replayed (a worker takes
// the run up where its log ends) or discarded (the run ends failed) — audited as the CLI's are.

import type { Api } from "@forge/client";
import { useState } from "react";

import { describe, gql } from "../api";
import { Go, Scroll, ShortId, States, useLoad } from "./common";

/** A dead letter as the API gives it (the generated type). */
type DeadLetter = Api.DeadLetter;

const LIST = `query DeadLetters { deadLetters(limit: 200) { id runId state attempts maxAttempts lastError } }`;

export function DeadLetters() {
  const { value, error, loading, reload } = useLoad(() => gql<{ deadLetters: DeadLetter[] }>(LIST), []);
  const [busy, setBusy] = useState<string | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const [failed, setFailed] = useState<string | null>(null);
  const jobs = value?.deadLetters ?? [];

  const act = async (job: DeadLetter, replay: boolean) => {
    setBusy(job.id);
    setFailed(null);
    setDone(null);
    try {
      if (replay) {
        await gql("mutation Replay($id: ID!) { replayDeadLetter(jobId: $id) { id state } }", { id: job.id });
        setDone(`Replayed: a worker takes run …${job.runId.slice(-8)} up again.`);
      } else {
        await gql("mutation Discard($id: ID!) { discardDeadLetter(jobId: $id) { id state } }", { id: job.id });
        setDone(`Discarded: run …${job.runId.slice(-8)} ended failed.`);
      }
      reload();
    } catch (e) {
      setFailed(describe(e));
    } finally {
      setBusy(null);
    }
  };

  return (
    <section aria-labelledby="dlq-heading">
      <h2 id="dlq-heading">Dead letters</h2>
      <p className="muted">
        Runs no worker could finish within their attempts. Replay gives one a fresh attempt budget;
        discard ends its run failed. Both are recorded in the audit trail.
      </p>
      {done && (
        <p role="status" className="notice">
          {done}
        </p>
      )}
      {failed && (
        <p role="alert" className="error">
          {failed}
        </p>
      )}
      <States loading={loading} error={error} empty={jobs.length === 0} what="dead letters" />
      {jobs.length > 0 && (
        <Scroll label="Dead letters table">
          <table className="data">
            <thead>
              <tr>
                <th scope="col">Job</th>
                <th scope="col">Run</th>
                <th scope="col">Attempts</th>
                <th scope="col">Last error</th>
                <th scope="col">Act</th>
              </tr>
            </thead>
            <tbody>
              {jobs.map((j) => (
                <tr key={j.id}>
                  <td>
                    <ShortId id={j.id} />
                  </td>
                  <td>
                    <Go to={`/console/runs/${j.runId}`}>
                      <ShortId id={j.runId} />
                    </Go>
                  </td>
                  <td className="num">
                    {j.attempts}/{j.maxAttempts}
                  </td>
                  <td className="detail">{j.lastError ?? "—"}</td>
                  <td>
                    <div className="row">
                      <button type="button" disabled={busy !== null} onClick={() => void act(j, true)}>
                        Replay
                      </button>
                      <button type="button" className="secondary" disabled={busy !== null} onClick={() => void act(j, false)}>
                        Discard
                      </button>
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
    </section>
  );
}
