import { useEffect, useState } from "react";

import { claims, endSession, onSessionChange, setToken, token, whenSignInRequired } from "./api";
import { follow, navigate, useRoute } from "./router";
import { Console } from "./console/Console";
import { SignIn, returnTo } from "./screens/SignIn";
import { ThreadList } from "./screens/ThreadList";
import { ThreadPage } from "./screens/ThreadPage";

/** Where to come back to after signing in (this tab's). */
function remember(): void {
  if (location.pathname !== "/sign-in") sessionStorage.setItem("forge.returnTo", location.pathname + location.search);
}

export function App() {
  const route = useRoute();
  const [, setTick] = useState(0);
  const rerender = () => setTick((t) => t + 1);

  useEffect(() => {
    // A refused or expired token: keep the page's state, send the user to sign in, come back.
    whenSignInRequired(() => {
      if (location.pathname !== "/sign-in") {
        remember();
        endSession("refused");
        navigate("/sign-in");
      }
    });
    // The session is shared by every tab: another tab signing in or out changes this one.
    return onSessionChange(() => {
      rerender();
      if (token() && location.pathname === "/sign-in") navigate(returnTo(), true);
    });
  }, []);

  const t = token();
  const who = claims(t);
  const signedIn = t !== null && who !== null;
  useEffect(() => {
    if (!signedIn && route.name !== "sign-in") {
      remember();
      navigate("/sign-in", true);
    }
  }, [signedIn, route.name]);

  // The session ends at its expiry even when nothing is asked of the server then.
  const exp = who?.exp;
  useEffect(() => {
    if (!exp) return;
    const timer = setTimeout(() => {
      if (token() === null) {
        rerender();
      }
    }, Math.max(0, exp * 1000 - Date.now()) + 50);
    return () => clearTimeout(timer);
  }, [exp]);

  const signOut = () => {
    setToken(null);
    rerender();
    navigate("/sign-in");
  };

  return (
    <>
      <header className="top">
        <a className="brand" href="/" onClick={(e) => follow(e, "/")}>
          Forge
        </a>
        {signedIn && who && (
          <nav aria-label="Account">
            {who.roles?.some((r) => r === "admin" || r === "auditor") && (
              <a href="/console/runs" onClick={(e) => follow(e, "/console/runs")}>
                Console
              </a>
            )}
            <span className="who">
              {who.sub} · {who.tenant_id}
            </span>
            <button type="button" className="link" onClick={signOut}>
              Sign out
            </button>
          </nav>
        )}
      </header>
      <main id="main">
        {route.name === "sign-in" || !signedIn ? (
          <SignIn onSignedIn={rerender} />
        ) : route.name === "threads" ? (
          <ThreadList />
        ) : route.name === "thread" ? (
          <ThreadPage id={route.id} key={route.id} />
        ) : route.name === "console" ? (
          <Console screen={route.screen} id={route.id} search={route.search} />
        ) : (
          <section>
            <h1>Page not found</h1>
            <p>
              <a href="/" onClick={(e) => follow(e, "/")}>Back to your threads</a>
            </p>
          </section>
        )}
      </main>
    </>
  );
}
