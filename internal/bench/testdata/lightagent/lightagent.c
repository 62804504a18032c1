/*
 * lightagent is the lightest stand-in for an ACP agent that symm-mcp's
 * spawns can run on: make bench-scale times spawns on it beside the fake
 * agent (intent 0050), so that the figure is the server's and not the
 * fixture's. It answers from a script fixed at build time, with replies
 * held as bytes: per request it finds the id and the method, the first of
 * each on the line (the ACP SDK writes the envelope before the params),
 * and writes the precomputed reply with the id put in. No JSON is decoded
 * or encoded, and nothing is allocated per request once the buffer has
 * grown.
 *
 * The script is what a spawn of "hello" under the codex adapter asks of
 * an agent: initialize; session/new, answered with the one mode the
 * adapter pins (read-only) current; session/set_mode, answered after a
 * current_mode_update; session/prompt, answered with end_turn after one
 * agent_message_chunk. Any other request is answered "method not found";
 * notifications (session/cancel) are ignored. A line longer than the
 * buffer (a long prompt) is gathered whole; a descriptor its parent left
 * non-blocking is waited on. It exits 0 at the end of its input, 1 with a
 * line on stderr when a read or a write fails (a closed stdout kills it
 * with SIGPIPE, as it did the Go program it replaces).
 *
 * Why C: it was a static Go program, and the Go runtime's start was most
 * of its cost, 1.4-1.5 ms of CPU per exec against 0.3-0.35 ms for this
 * one linked static against glibc (intent 0050): the fixture, not the
 * server, was much of what spawns-server measured. Build it with
 *   cc -O2 -static -Wall -Wextra -Werror -o light-acp-agent lightagent.c
 * (make bench-bin). Portable C and POSIX; memmem is glibc's (_GNU_SOURCE).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The one session id the agent hands out: one agent process runs one
 * session. */
#define SESSION "\"light-1\""
#define UPDATE(u) "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":" SESSION ",\"update\":" u "}}\n"
#define HEAD "{\"jsonrpc\":\"2.0\",\"id\":"

/* A request's answer: the bytes before its id, and after. */
struct reply {
	const char *method, *before, *after;
};

/* The script; the last entry, with no method, answers any other request. */
static const struct reply script[] = {
	{"initialize", HEAD, ",\"result\":{\"agentCapabilities\":{\"auth\":{},\"mcpCapabilities\":{},\"promptCapabilities\":{},\"sessionCapabilities\":{}},\"authMethods\":[],\"protocolVersion\":1}}\n"},
	{"session/new", HEAD, ",\"result\":{\"modes\":{\"availableModes\":[{\"id\":\"read-only\",\"name\":\"Read only\"}],\"currentModeId\":\"read-only\"},\"sessionId\":" SESSION "}}\n"},
	{"session/set_mode", UPDATE("{\"sessionUpdate\":\"current_mode_update\",\"currentModeId\":\"read-only\"}") HEAD, ",\"result\":{}}\n"},
	{"session/prompt", UPDATE("{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"ok\"}}") HEAD, ",\"result\":{\"stopReason\":\"end_turn\"}}\n"},
	{NULL, HEAD, ",\"error\":{\"code\":-32601,\"message\":\"method not found\"}}\n"},
};

/* out holds one reply whole, so that it leaves in one write; a reply with
 * a longer id goes out in three. */
static char out[4096];

/* token is the JSON number or string after the first key on the line
 * [line, end), NULL when there is none; a string is taken up to its
 * closing quote, a number up to the next ',' or '}'. */
static const char *token(const char *line, const char *end, const char *key, size_t *n)
{
	size_t kl = strlen(key);
	const char *p = memmem(line, (size_t)(end - line), key, kl);
	if (p == NULL)
		return NULL;
	p += kl;
	if (p < end && *p == '"') {
		for (const char *q = p + 1; q < end; q++) {
			if (*q == '\\') {
				if (++q == end)
					return NULL;
			} else if (*q == '"') {
				*n = (size_t)(q + 1 - p);
				return p;
			}
		}
		return NULL;
	}
	const char *q = p;
	while (q < end && *q != ',' && *q != '}')
		q++;
	if (q == p || q == end)
		return NULL;
	*n = (size_t)(q - p);
	return p;
}

/* await waits until fd is ready for events, for a descriptor its parent
 * left non-blocking (the Go program it replaces waited on one too); 0
 * when it may be tried again, -1 when poll fails. */
static int await(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};
	while (poll(&p, 1, -1) < 0)
		if (errno != EINTR)
			return -1;
	return 0;
}

/* put writes all n bytes of p to stdout; -1 when a write fails. */
static int put(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(STDOUT_FILENO, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (await(STDOUT_FILENO, POLLOUT) != 0)
				return -1;
			continue;
		}
		if (w == 0)
			errno = EIO; /* nothing written, and no error said why */
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* answer writes the reply to the request on the line [line, end), if it
 * is one (it has an id); -1 when the write fails. */
static int answer(const char *line, const char *end)
{
	size_t il, ml = 0;
	const char *id = token(line, end, "\"id\":", &il);
	if (id == NULL)
		return 0;
	const char *m = token(line, end, "\"method\":", &ml);
	const struct reply *r = script;
	if (m != NULL && ml >= 2 && *m == '"') {
		/* Methods have no escapes: the bytes between the quotes. */
		for (; r->method != NULL; r++)
			if (strlen(r->method) == ml - 2 && memcmp(m + 1, r->method, ml - 2) == 0)
				break;
	} else {
		while (r->method != NULL)
			r++;
	}
	size_t b = strlen(r->before), a = strlen(r->after);
	if (b + il + a > sizeof out)
		return put(r->before, b) || put(id, il) || put(r->after, a) ? -1 : 0;
	memcpy(out, r->before, b);
	memcpy(out + b, id, il);
	memcpy(out + b + il, r->after, a);
	return put(out, b + il + a);
}

/* fail writes "lightagent: what: the error" on stderr and returns 1, the
 * exit status. */
static int fail(const char *what)
{
	const char *e = strerror(errno);
	(void)!write(STDERR_FILENO, "lightagent: ", 12);
	(void)!write(STDERR_FILENO, what, strlen(what));
	(void)!write(STDERR_FILENO, ": ", 2);
	(void)!write(STDERR_FILENO, e, strlen(e));
	(void)!write(STDERR_FILENO, "\n", 1);
	return 1;
}

int main(void)
{
	/* buf holds the lines not answered yet, [buf, buf+len); the first
	 * scanned bytes of them hold no newline. It doubles when a line
	 * fills it. */
	size_t cap = 64 << 10, len = 0, scanned = 0;
	char *buf = malloc(cap);
	if (buf == NULL)
		return fail("malloc");
	for (;;) {
		if (len == cap) {
			char *grown = realloc(buf, cap * 2);
			if (grown == NULL)
				return fail("realloc");
			buf = grown;
			cap *= 2;
		}
		ssize_t r = read(STDIN_FILENO, buf + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (await(STDIN_FILENO, POLLIN) != 0)
				return fail("poll /dev/stdin");
			continue;
		}
		if (r < 0)
			return fail("read /dev/stdin");
		if (r == 0) {
			/* The last line, without its newline. */
			if (len > 0 && answer(buf, buf + len) != 0)
				return fail("write /dev/stdout");
			return 0;
		}
		len += (size_t)r;
		char *start = buf, *from = buf + scanned, *nl;
		while ((nl = memchr(from, '\n', (size_t)(buf + len - from))) != NULL) {
			if (answer(start, nl) != 0)
				return fail("write /dev/stdout");
			start = from = nl + 1;
		}
		len -= (size_t)(start - buf);
		memmove(buf, start, len);
		scanned = len;
	}
}
