#!/usr/bin/env python3
"""tool-calls-bench.py: wall time of chat requests with tools against a running packserve
server, by tool_choice: the constraint's compile on the first request of a kind (cold) and the
median of the later ones (the compiled constraint cached).

  scripts/tool-calls-bench.py --url http://127.0.0.1:8000 --model NAME [--rounds 5]
      [--max-tokens 32] [--concurrency 1] [--choices auto,named,required,none,auto_strict]

auto_strict is tool_choice auto with every tool marked "strict": true.

With --concurrency N each round sends N requests at once (distinct prompts) and the line also
has the rounds' median output tokens/s.

Six tools of the shapes agents send (nested objects, arrays, enums, integer ranges; strings
without maxLength, as OpenAI-style tool schemas mostly are: a bounded string costs the
automaton a copy per character, docs/engine.md "Structured outputs"). Prints one JSON
line per tool_choice: cold_s, warm_median_s, finish_reason, calls of the last round.
"""
import argparse
import concurrent.futures
import json
import statistics
import time
import urllib.request

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                    "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "web_search", "description": "Search the web",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 20}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "create_event", "description": "Add a calendar event",
     "parameters": {"type": "object", "properties": {
         "title": {"type": "string"},
         "start": {"type": "string"}, "duration_minutes": {"type": "integer", "minimum": 5},
         "attendees": {"type": "array", "items": {"type": "string"}},
         "location": {"type": "object", "properties": {"name": {"type": "string"},
                                                       "online": {"type": "boolean"}}, "required": ["online"]}},
         "required": ["title", "start"]}}},
    {"type": "function", "function": {"name": "send_email", "description": "Send an email",
     "parameters": {"type": "object", "properties": {
         "to": {"type": "array", "items": {"type": "string"}, "minItems": 1},
         "subject": {"type": "string"}, "body": {"type": "string"}},
         "required": ["to", "subject", "body"]}}},
    {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic",
     "parameters": {"type": "object", "properties": {"expression": {"type": "string"},
                    "precision": {"type": "number"}}, "required": ["expression"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time"}},
]


def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as res:
        answer = json.loads(res.read())
    return time.perf_counter() - t0, answer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--choices", default="auto,named,required")
    args = ap.parse_args()
    all_choices = {"auto": "auto", "none": "none",
                   "named": {"type": "function", "function": {"name": "create_event"}},
                   "required": "required", "auto_strict": "auto"}
    # auto_strict: tool_choice auto with every tool marked strict (the calls the model opens
    # are held to the tools' schemas).
    strict_tools = [{**t, "function": {**t["function"], "strict": True}} for t in TOOLS]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency)
    for label in args.choices.split(","):
        times, rates = [], []
        answers = []
        for r in range(args.rounds + 1):
            tools = strict_tools if label == "auto_strict" else TOOLS
            bodies = [{"model": args.model, "tools": tools, "tool_choice": all_choices[label],
                       "temperature": 0, "max_tokens": args.max_tokens,
                       "messages": [{"role": "user",
                                     "content": f"Plan a meeting with Ana tomorrow ({r}, {k})"}]}
                      for k in range(args.concurrency)]
            t0 = time.perf_counter()
            results = list(pool.map(lambda b: post(args.url, b), bodies))
            wall = time.perf_counter() - t0
            answers = [a for _, a in results]
            times.append(wall)
            rates.append(sum(a["usage"]["completion_tokens"] for a in answers) / wall)
        first = answers[0]
        print(json.dumps({"tool_choice": label, "concurrency": args.concurrency,
                          "cold_s": round(times[0], 3),
                          "warm_median_s": round(statistics.median(times[1:]), 3),
                          "warm_output_tokens_per_s": round(statistics.median(rates[1:]), 1),
                          "finish_reasons": sorted({a["choices"][0]["finish_reason"] for a in answers}),
                          "prompt_tokens": first["usage"]["prompt_tokens"],
                          "completion_tokens": sum(a["usage"]["completion_tokens"] for a in answers),
                          "calls": sum(len(a["choices"][0]["message"].get("tool_calls") or [])
                                       for a in answers)}))


if __name__ == "__main__":
    main()
