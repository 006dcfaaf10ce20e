import { type FormEvent, useEffect, useState } from "react";

import { claims, describe, devSignIn, devSignInEnabled, sessionEnd, setToken } from "../api";
import { navigate } from "../router";

/** Where this tab was before it was sent to sign in (once). */
export function returnTo(): string {
  const to = sessionStorage.getItem("forge.returnTo");
  sessionStorage.removeItem("forge.returnTo");
  return to && to !== "/sign-in" ? to : "/";
}

export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  const [pasted, setPasted] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [dev, setDev] = useState(false);
  // After a session ended, the form is for the same person; otherwise it is empty.
  const [ended] = useState(sessionEnd);
  const [tenant, setTenant] = useState(ended?.tenant ?? "");
  const [principal, setPrincipal] = useState(ended?.sub ?? "");
  const [roles, setRoles] = useState(ended?.roles.join(", ") ?? "");
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    let live = true;
    devSignInEnabled().then((on) => live && setDev(on));
    return () => {
      live = false;
    };
  }, []);

  const done = (t: string) => {
    const c = claims(t);
    if (!c || !c.sub) {
      setError("That is not a token: paste the whole JWT.");
      return;
    }
    if (c.exp && c.exp * 1000 < Date.now()) {
      setError("That token has expired.");
      return;
    }
    setToken(t);
    onSignedIn();
    navigate(returnTo(), true);
  };

  const paste = (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    done(pasted.trim());
  };

  const development = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    setBusy(true);
    try {
      const list = roles
        .split(",")
        .map((r) => r.trim())
        .filter(Boolean);
      done(await devSignIn(tenant.trim(), principal.trim(), list));
    } catch (err) {
      setError(describe(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section className="narrow">
      <h1>Sign in</h1>
      {ended && (
        <p role="status" className="notice">
          {ended.reason === "expired" ? "Your session" : "The server no longer accepts your session"} as{" "}
          <strong>{ended.sub}</strong>
          {ended.tenant ? ` (${ended.tenant})` : ""}{" "}
          {ended.reason === "expired" ? `expired at ${new Date(ended.at).toLocaleTimeString()}` : "ended"}. Sign in
          again to go back to where you were.
        </p>
      )}
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      <form onSubmit={paste} className="card">
        <h2>With a token</h2>
        <label htmlFor="token">Bearer token</label>
        <textarea
          id="token"
          rows={4}
          value={pasted}
          onChange={(e) => setPasted(e.target.value)}
          placeholder="eyJ…"
          spellCheck={false}
        />
        <p className="hint">
          Development tokens: <code>forge token --tenant acme --principal alice</code>
        </p>
        <button type="submit" disabled={!pasted.trim()}>
          Sign in
        </button>
      </form>
      {dev && (
        <form onSubmit={development} className="card">
          <h2>Development sign-in</h2>
          <p className="hint">This server hands out tokens for anyone: never in production.</p>
          <label htmlFor="tenant">Tenant</label>
          <input id="tenant" value={tenant} onChange={(e) => setTenant(e.target.value)} />
          <label htmlFor="principal">Principal</label>
          <input id="principal" value={principal} onChange={(e) => setPrincipal(e.target.value)} />
          <label htmlFor="roles">Roles (comma separated)</label>
          <input id="roles" value={roles} onChange={(e) => setRoles(e.target.value)} />
          <button type="submit" disabled={busy || !tenant.trim() || !principal.trim()}>
            Sign in for development
          </button>
        </form>
      )}
    </section>
  );
}
