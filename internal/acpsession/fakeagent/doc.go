// Package fakeagent is a scriptable fake ACP agent, built on the ACP SDK's
// agent side, for tests and load harnesses.
//
// # Running it
//
// In process, over pipes: Serve(ctx, stdin, stdout, stderr, cfg). Serve
// returns when stdin ends, ctx is done, or an exit step runs (it then
// returns an *ExitError); the caller closes the pipes afterwards.
//
// As a child process, with the helper-process pattern: in a package's
// TestMain,
//
//	if fakeagent.IsHelper() { os.Exit(fakeagent.Main()) }
//
// and launch os.Args[0] (better: os.Executable()) with SYMM_FAKE_AGENT=1 in
// its environment. The
// binary in cmd/fake-acp-agent runs Main unconditionally. Main reads its
// Config from fake-agent.json in the working directory if that file exists,
// else from the JSON text in SYMM_FAKE_AGENT_CONFIG, else uses defaults.
// Unknown keys are errors (exit status 2), here and in scripts. When stdin
// ends the agent stops at once, like a process exiting on EOF: requests
// still being handled are not answered, and the exit status is 0.
//
// # Config
//
//	{
//	  "agent_info": {"name": "fake", "version": "1.0"},   // initialize's agentInfo
//	  "load_session": true,          // advertise loadSession and serve session/load
//	  "reject_load": true,           // every session/load and session/resume fails ("session not found")
//	  "resume_session": true,        // advertise sessionCapabilities.resume and serve session/resume
//	  "close_session": true,         // advertise sessionCapabilities.close and serve session/close
//	  "list_sessions": true,         // advertise sessionCapabilities.list and serve session/list
//	  "modes": {"current": "ask", "available": [{"id": "ask", "name": "Ask"}, {"id": "code"}]},
//	  "config_options": [ ...raw ACP SessionConfigOption objects, select or boolean... ],
//	  "auth_methods": [ ...raw ACP AuthMethod objects: {"id": "key", "name": "API key", "description": "..."}... ],
//	  "auth_required_in": ["session/new"], // answer these methods with ACP auth_required (-32000)
//	  "hang_in": "session/new",      // never answer this method
//	  "fail_in": {"session/new": "msg"}, // answer these methods with JSON-RPC error -32603 msg
//	  "updates_before_new_session_response": [ ...raw session updates... ],
//	  "new_session_steps": [ ...steps... ],  // run in session/new before answering
//	  "request_log": "/path/log.jsonl",
//	  "state_dir": "/path/dir",      // default: .fake-acp-agent in the working directory
//	  "ignore_sigterm": true,        // process mode: SIGTERM is ignored
//	  "linger_after_eof": true,      // process mode: keep running after stdin ends
//	  "stderr": ["line", ...],       // written to stderr at startup
//	  "turn": { ...script... },      // the turn when the prompt is not a script
//	  "steering": {"outcome": "failed"} // offer and serve _session/steering
//	}
//
// steering makes initialize's top-level _meta {"steering":{"supported":true}},
// as claude-agent-acp and codex-acp send it, and serves _session/steering
// as they do: while a turn runs the steer is injected into it (outcome
// "injected"; an await_steer step takes it); with no turn running and
// _meta.steering.idleBehavior "promptRequired" the answer is
// {"outcome":"promptRequired","reason":"noRunningTurn"}; another
// idleBehavior is invalid params; none (where the real agents start a turn
// of their own) is refused as invalid params too. outcome, when set, is
// the answer to every steer. Without steering, _session/steering is
// method not found (-32601), as copilot, cline and opencode answer it.
// fail_in and hang_in take "_session/steering".
//
// auth_methods are listed in initialize's authMethods (none by default).
// Method names in hang_in, fail_in and auth_required_in are ACP names
// (initialize, session/new, session/load, session/resume, session/close,
// session/set_mode, session/set_config_option, session/prompt) or the short
// names initialize, new_session, load_session, resume_session,
// close_session, set_mode, set_config_option, prompt.
//
// modes is absent by default (no "modes" in session responses). Each new
// session starts from modes and config_options; session/set_mode answers
// for an available id (and sends current_mode_update before answering),
// session/set_config_option sets a select option (ValueId request, value
// among its options, groups included) or a boolean option (Boolean request
// with "type":"boolean") and answers with the full configOptions. A mode
// change also moves the config option of category "mode" (or id "mode")
// when it offers that value, and the reverse (then a current_mode_update is
// sent before the answer). Anything else — an unknown
// session, mode, option or value, or a request of the wrong variant for the
// option's type — is answered with JSON-RPC error -32602.
//
// updates_before_new_session_response are raw update objects (what goes in
// params.update), sent for the new session, in order, before the
// session/new response. new_session_steps then run (script steps, see
// below) before the answer too: a permission step there is a request
// outside any prompt turn.
//
// request_log, when set, gets one JSON line appended per message received
// that has a method, in arrival order, before it is handled:
// {"method": "session/new", "params": {...}}. Script steps add lines:
// {"permission": {"tool_call_id": "t1", "outcome": "selected", "option_id": "a"}}
// ("outcome" is "selected", "cancelled" or "error", with "error" then),
// {"response": {"method": "fs/read_text_file", "id": 0, "result": ..., "error": ...}}
// for request steps, and {"fork": {"pids": [123, 124]}}. A session/load
// that succeeds adds {"load": {"session_id": "fake-…", "replayed": 2}} once
// it has replayed that many history entries, before its answer.
//
// Sessions persist to state_dir as <session id>.json (only when
// load_session or resume_session is set): their cwd, current modes and
// config options, and history (each prompt and the agent's message text).
// A session/load or session/resume — possibly in another process — of an
// unknown id, or with another cwd, fails with JSON-RPC error -32002;
// otherwise a load replays the history as user_message_chunk and
// agent_message_chunk updates before the answer, which carries the saved
// modes and config options. A resume replays nothing and logs
// {"resume": {"session_id": "fake-…", "history": 2}}. session/close
// cancels the session's turn and lets the session go from memory; its saved
// state stays, so a closed session still loads and resumes.
//
// Usage comes both ways ACP defines: a script's "usage" is the prompt
// response's usage, and a raw_update step sends a usage_update
// ({"sessionUpdate": "usage_update", "used": 10, "size": 100, "cost":
// {"amount": 0.5, "currency": "USD"}}); a session_info_update names the
// session ({"sessionUpdate": "session_info_update", "title": "..."}).
//
// # Impersonating a real agent
//
// OfferConfig turns a real agent's initialize and session/new results (as
// scripts/capture-offers records them in testdata/agents/<agent>;
// OfferConfigDir reads such a directory) into a Config whose agent_info,
// load_session, modes and config_options offer what that agent offered.
// Add the rest (request_log, fail_in, ...) to the Config it returns.
//
// # Scripts
//
// A turn runs a script: the prompt text itself when it parses as a JSON
// object with a "steps" key, else config "turn", else the default, one
// agent_message_chunk "ok: <prompt>" and stop reason end_turn. A script
// that does not parse fails the prompt with JSON-RPC error -32602.
//
//	{
//	  "steps": [ ...steps... ],
//	  "stop_reason": "end_turn",        // when the steps run out (default end_turn)
//	  "usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3},  // prompt result usage
//	  "after_response": [ ...steps... ] // run after the prompt response was written;
//	                                    // they finish before the agent exits on stdin EOF
//	}
//
// Each step is an object with exactly one of these keys; "session_id" may
// accompany any step that sends an update, and a permission step, to send
// it for another session.
//
//	{"message": "text"}       agent_message_chunk with a text block
//	{"thought": "text"}       agent_thought_chunk with a text block
//	{"chunks": {"n": 1000, "text": "c{i} ", "tool_call_every": 100}}
//	                          n agent_message_chunk updates; "{i}" in text is
//	                          replaced by the chunk's index (from 0); with
//	                          tool_call_every k, after every k-th chunk a
//	                          tool_call {"toolCallId": "tc-<i>", "title":
//	                          "chunk tool", "kind": "read", "status": "pending"}
//	{"flood": {"n": 100000, "tool_call_update_every": 10, "text": "c{i} "}}
//	                          n updates from lines encoded once (FloodLines),
//	                          written in 64 KiB batches of whole lines as fast
//	                          as stdout takes them: agent_message_chunk with
//	                          text ("{i}" is the update's index, from 0;
//	                          default DefaultFloodText) and, with
//	                          tool_call_update_every k, every k-th update a
//	                          tool_call_update {"toolCallId": "tc-<i>",
//	                          "status": "completed", "rawOutput": {...},
//	                          "content": [...]}. Cancel is checked between
//	                          batches; the text is not kept in the history
//	{"plan": [ ...entries... ]}   plan update with these entries
//	{"tool_call": {...}}      tool_call update: the object's fields as ACP
//	                          names them (toolCallId, title, kind, status,
//	                          rawInput, rawOutput, content, locations, ...)
//	{"tool_call_update": {...}}   the same for tool_call_update
//	{"permission": {"tool_call_id": "t1", "title": "Run ls", "kind": "execute",
//	                "options": [{"id": "a", "name": "Allow", "kind": "allow_once"}],
//	                "mode_switch": false, "raw_input": {...}, "request_id": 0, "report": true}}
//	                          session/request_permission; waits for the answer
//	                          and logs it. Options default (when absent) to
//	                          allow_once "allow", allow_always "always",
//	                          reject_once "reject", reject_always "never";
//	                          "options": [] offers none. mode_switch sends kind
//	                          "switch_mode". request_id (any JSON id) defaults
//	                          to a counter from 0, shared with request steps.
//	                          report emits a message "permission <tool_call_id>:
//	                          selected <option id>" or "...: cancelled".
//	{"raw_update": {...}}     a session/update with this update object, as is
//	                          (unknown sessionUpdate types welcome)
//	{"notify": {"method": "_x/status", "params": {...}}}   a notification
//	{"request": {"method": "fs/read_text_file", "params": {...}, "id": "u-1", "report": true}}
//	                          a request to the client; waits for the answer and
//	                          logs it; report emits "response <method>: <json>"
//	{"stderr": "text"}        a line on stderr
//	{"env": "NAME"}           agent_message_chunk "NAME=<value>" from the
//	                          agent's environment, or "NAME unset"
//	{"pid": true}             agent_message_chunk "pid=<n>", the agent's process id
//	{"wait_file": "/path"}    wait until this file exists (a cancel ends the
//	                          turn with stop reason cancelled)
//	{"stderr_flood": {"bytes": 1048576}}   that many bytes of stderr, in lines
//	{"stdout_raw": "not json"}            this line on stdout
//	{"stdout_raw": {"bytes": 11534337}}   a line of that many 'x' bytes
//	{"wait_for_cancel": true} wait for session/cancel, then end the turn
//	                          with stop reason cancelled
//	{"await_steer": true}     wait for a steer injected into this turn
//	                          (_session/steering), then agent_message_chunk
//	                          "steered: <its text>"; a cancel ends the turn
//	{"await_cancel": true}    wait for session/cancel, then go on with the
//	                          next steps, no longer stopped by the cancel (an
//	                          agent that still asks permission while cancelling)
//	{"hang": true}            block until the agent ends (ignores cancel)
//	{"sleep_ms": 10}          pause
//	{"exit": {"code": 3}}     exit now (in process: Serve returns *ExitError)
//	{"signal": "SIGSEGV"}     process mode: die of this signal (SIGSEGV,
//	                          SIGKILL, SIGTERM, SIGABRT, SIGINT, SIGHUP,
//	                          SIGQUIT, SIGBUS); in process: Serve returns
//	                          *ExitError{Code: 128+signo}
//	{"fork": {"n": 2, "hold_stdout": true, "setsid": false}}
//	                          start n grandchildren (os.Executable with
//	                          SYMM_FAKE_AGENT=1 SYMM_FAKE_AGENT_MODE=sleep)
//	                          that sleep until killed; hold_stdout gives them
//	                          this process's stdout (process mode), setsid puts
//	                          them in a session of their own. Their pids go to
//	                          the request log and to stderr.
//	{"write_file": {"path": "a.txt", "content": "..."}}   write this file (a
//	                          relative path is from the session's cwd), as an
//	                          agent editing its workspace does
//	{"close_stdout": true}    close stdout, keep running
//	{"stop_reason": "max_tokens"}   end the turn now with this stop reason
//
// Between steps the turn checks for session/cancel and, when it came, ends
// with stop reason cancelled. Steps write raw JSON lines through the same
// locked writer as the SDK, so lines never interleave.
package fakeagent
