"""A scripted OpenAI-compatible endpoint on localhost, for tests of the API clients."""
import http.server
import json
import threading
import time


class ChatServer:
  """Answers POST /v1/chat/completions (and /v1/completions, whose body has a prompt)
  from a list of actions, one per request:
  ("sleep", seconds) | ("status", code[, headers]) | ("body", raw bytes) |
  ("html", raw bytes) | ("json", any JSON value) | ("reply", content). After the
  list: ("reply", reply(body)), with `usage(body)` as the completion's usage if given.
  `chat=False`: an endpoint with no chat API (every chat request a 400, as vLLM answers
  for a model without a chat template)."""

  def __init__(self, actions, reply=lambda body: '{"reasoning": "fine", "decision": "OK"}',
               usage=None, chat: bool = True):
    self.actions, self.lock, self.bodies, self.paths = list(actions), threading.Lock(), [], []
    outer = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with outer.lock:
          outer.bodies.append((body, self.headers.get("Authorization")))
          outer.paths.append(self.path)
          action = outer.actions.pop(0) if outer.actions else ("reply", reply(body))
          if not chat and "messages" in body:
            action = ("status", 400)
        kind, arg, headers = action[0], action[1], action[2] if len(action) > 2 else {}
        if kind == "sleep":
          time.sleep(arg)
          kind, arg = "reply", '{"reasoning": "fine", "decision": "OK"}'
        content_type = "application/json"
        if kind == "status":
          data = json.dumps({"error": {"message": "scripted", "type": "x"}}).encode()
          code = arg
        elif kind in ("body", "html"):  # A 200 whose body is not a completion.
          code, data = 200, arg
          content_type = "text/html" if kind == "html" else content_type
        elif kind == "json":
          code, data = 200, json.dumps(arg).encode()
        elif kind == "reply":
          choice = ({"text": arg} if "prompt" in body else  # /v1/completions: raw text.
                    {"message": {"role": "assistant", "content": arg}})
          completion = {
              "id": "c", "object": "text_completion" if "prompt" in body else "chat.completion",
              "created": 0, "model": body["model"],
              "choices": [{"index": 0, "finish_reason": "stop", **choice}]}
          if usage is not None:
            completion["usage"] = usage(body)
          code, data = 200, json.dumps(completion).encode()
        try:
          self.send_response(code)
          self.send_header("Content-Type", content_type)
          for name, value in headers.items():
            self.send_header(name, value)
          self.send_header("Content-Length", str(len(data)))
          self.end_headers()
          self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
          pass

    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
    threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

  def close(self):
    self.httpd.shutdown()
    self.httpd.server_close()
