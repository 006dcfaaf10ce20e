import { useEffect, useState } from "react";

import { claims, setToken, token, whenSignInRequired } from "./api";
import { navigate, useRoute } from "./router";
import { SignIn } from "./screens/SignIn";
import { ThreadList } from "./screens/ThreadList";
import { ThreadPage } from "./screens/ThreadPage";

export function App() {
  const route = useRoute();
  const [, setTick] = useState(0);

  useEffect(() => {
    // A refused or expired token: keep the page's state, send the user to sign in, come back.
    whenSignInRequired(() => {
      if (location.pathname !== "/sign-in") {
        sessionStorage.setItem("forge.returnTo", location.pathname);
        setToken(null);
        navigate("/sign-in");
      }
    });
  }, []);

  const who = claims();
  const signedIn = token() !== null && who !== null;
  useEffect(() => {
    if (!signedIn && route.name !== "sign-in") {
      sessionStorage.setItem("forge.returnTo", location.pathname);
      navigate("/sign-in", true);
    }
  }, [signedIn, route.name]);

  const signOut = () => {
    setToken(null);
    setTick((t) => t + 1);
    navigate("/sign-in");
  };

  return (
    <>
      <header className="top">
        <a className="brand" href="/" onClick={(e) => { e.preventDefault(); navigate("/"); }}>
          Forge
        </a>
        {signedIn && who && (
          <nav aria-label="Account">
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
          <SignIn onSignedIn={() => setTick((t) => t + 1)} />
        ) : route.name === "threads" ? (
          <ThreadList />
        ) : route.name === "thread" ? (
          <ThreadPage id={route.id} key={route.id} />
        ) : (
          <section>
            <h1>Page not found</h1>
            <p>
              <a href="/" onClick={(e) => { e.preventDefault(); navigate("/"); }}>Back to your threads</a>
            </p>
          </section>
        )}
      </main>
    </>
  );
}
