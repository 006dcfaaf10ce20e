# The shared workload (shared/bench/WORKLOAD.md) on LangGraph with its PostgreSQL checkpointer,
# against forge-bench's mock: a prebuilt ReAct agent, streamed model calls, one `lookup` tool, a
# thread per run. Prints median and p95 ms of 100 sequential runs, runs/s with 50 in flight, CPU ms
# per run of this process and of every `postgres` process on the machine.
# Usage: python langgraph-pg.py BASE_URL POSTGRES_URL (not langgraph.py: a script of that name
# shadows the langgraph package it imports)
import asyncio, os, resource, sys, time, uuid

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.prebuilt import create_react_agent
from psycopg_pool import AsyncConnectionPool


@tool
def lookup(key: str) -> str:
    """Looks a key up."""
    return "value"


def pg_cpu_ms():
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1 : s.rindex(")")]
        if not name.startswith("postgres"):
            continue
        fields = s[s.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total * 1000 / os.sysconf("SC_CLK_TCK")


def cpu_ms():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1000


async def main():
    base, dburl = sys.argv[1], sys.argv[2]
    llm = ChatOpenAI(model="mock-steps-3", base_url=base, api_key="x", streaming=True)
    async with AsyncConnectionPool(dburl, max_size=50, kwargs={"autocommit": True, "prepare_threshold": 0}) as pool:
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        agent = create_react_agent(llm, [lookup], checkpointer=saver, prompt="You look keys up.")

        async def run():
            cfg = {"configurable": {"thread_id": str(uuid.uuid4())}}
            out = await agent.ainvoke({"messages": [("user", "Look three keys up.")]}, cfg)
            assert out["messages"][-1].content, out

        for _ in range(10):
            await run()
        lat = []
        for _ in range(100):
            t = time.perf_counter()
            await run()
            lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        n, inflight = 300, 50
        left = [n]

        async def worker():
            while left[0] > 0:
                left[0] -= 1
                await run()

        c0, p0, t0 = cpu_ms(), pg_cpu_ms(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        secs = time.perf_counter() - t0
        print({"peer": "langgraph+postgres", "p50_ms": round(lat[50], 2), "p95_ms": round(lat[95], 2),
               "runs_per_s": round(n / secs, 1), "cpu_ms_per_run": round((cpu_ms() - c0) / n, 2),
               "pg_cpu_ms_per_run": round((pg_cpu_ms() - p0) / n, 2),
               "rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)})


asyncio.run(main())
