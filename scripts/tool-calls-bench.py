#!/usr/bin/env python3
"""tool-calls-bench.py: wall time of chat requests with tools against a running packserve
server, by tool_choice: the constraint's compile on the first request of a kind (cold) and the
median of the later ones (the compiled constraint cached).

  scripts/tool-calls-bench.py --url http://127.0.0.1:8000 --model NAME [--rounds 5]

Six tools of the shapes agents send (nested objects, arrays, enums, integer ranges; strings
without maxLength, as OpenAI-style tool schemas mostly are: a bounded string costs the
automaton a copy per character, docs/engine.md "Structured outputs"). Prints one JSON
line per tool_choice: cold_s, warm_median_s, finish_reason, calls of the last round.
"""
import argparse
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
    args = ap.parse_args()
    choices = {"auto": "auto",
               "named": {"type": "function", "function": {"name": "create_event"}},
               "required": "required"}
    for label, choice in choices.items():
        times = []
        answer = None
        for r in range(args.rounds + 1):
            body = {"model": args.model, "tools": TOOLS, "tool_choice": choice, "temperature": 0,
                    "max_tokens": args.max_tokens,
                    "messages": [{"role": "user", "content": f"Plan a meeting with Ana tomorrow ({r})"}]}
            seconds, answer = post(args.url, body)
            times.append(seconds)
        message = answer["choices"][0]["message"]
        print(json.dumps({"tool_choice": label, "cold_s": round(times[0], 3),
                          "warm_median_s": round(statistics.median(times[1:]), 3),
                          "finish_reason": answer["choices"][0]["finish_reason"],
                          "prompt_tokens": answer["usage"]["prompt_tokens"],
                          "completion_tokens": answer["usage"]["completion_tokens"],
                          "calls": len(message.get("tool_calls") or [])}))


if __name__ == "__main__":
    main()
