"""Producer and consumer as ``ray job submit`` scripts against a running rayq.

On a Ray cluster (``ray start --head``; see docs/guide/deploy.md), from the repo root:

    rayq start --store-dir /data/rayq                            # once: deploy rayq
    ray job submit --working-dir examples -- python producer_consumer_job.py produce
    ray job submit --working-dir examples -- python producer_consumer_job.py consume

(tests/integration/test_job_submit.py runs these against a Ray head of its own.)

``produce`` sends ``--messages`` orders; ``consume`` reads them with a PullConsumer
(group ``job-readers``) and commits, printing the lag it leaves.
"""

from __future__ import annotations

import argparse
import time

import rayq


def produce(n: int) -> None:
    with rayq.Producer("job-writers") as producer:
        t0 = time.perf_counter()
        messages = [
            rayq.Message("job-orders", f'{{"order": {i}}}'.encode(), keys=[f"order-{i}"])
            for i in range(n)
        ]
        futures = [producer.send_async(m) for m in messages]
        for f in futures:
            f.result(timeout=60)
    print(f"produced {n} messages in {time.perf_counter() - t0:.2f} s")


def consume(n: int) -> None:
    consumer = rayq.PullConsumer("job-readers", consume_from=rayq.ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("job-orders")
    consumer.start()
    got = 0
    deadline = time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        got += len(consumer.poll(timeout=1.0))
    consumer.commit()
    lag = sum(p.lag for p in rayq.Admin().consumer_progress("job-readers"))
    consumer.shutdown()
    print(f"consumed {got} messages; lag left: {lag}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=["produce", "consume"])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--namespace", default="rayq")
    args = parser.parse_args()
    rayq.connect(args.namespace)
    if args.role == "produce":
        rayq.Admin().create_topic("job-orders", queues=4)
        produce(args.messages)
    else:
        consume(args.messages)


if __name__ == "__main__":
    main()
