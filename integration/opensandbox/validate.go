package opensandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
)

var (
	docsOnce         sync.Once
	docsLC, docsEx   *apiDoc
	docsErr          error
	eventSchema      *base.Schema
	lcError, exError *base.Schema
	schemaValidator  schema_validation.SchemaValidator
)

// docs loads both documents once per process (the validators are safe for
// concurrent use).
func docs() (*apiDoc, *apiDoc, error) {
	docsOnce.Do(func() {
		if docsLC, docsErr = loadDoc("sandbox-lifecycle.yml"); docsErr != nil {
			return
		}
		if docsEx, docsErr = loadDoc("execd-api.yaml"); docsErr != nil {
			return
		}
		if eventSchema, docsErr = docsEx.schema("ServerStreamEvent"); docsErr != nil {
			return
		}
		if lcError, docsErr = docsLC.schema("ErrorResponse"); docsErr != nil {
			return
		}
		if exError, docsErr = docsEx.schema("ErrorResponse"); docsErr != nil {
			return
		}
		schemaValidator = schema_validation.NewSchemaValidator()
	})
	return docsLC, docsEx, docsErr
}

// validationRequest is a copy of the request addressed at the document's own
// path (no /v1, no execd proxy prefix).
func (x *exchange) validationRequest() *http.Request {
	v := x.r.Clone(x.r.Context())
	u := *x.r.URL
	u.Path, u.RawPath = x.rt.vpath, ""
	v.URL = &u
	v.RequestURI = u.RequestURI()
	v.Body = io.NopCloser(bytes.NewReader(x.body))
	v.ContentLength = int64(len(x.body))
	return v
}

func (x *exchange) where() string {
	name := "lifecycle"
	if x.rt.doc == x.s.ex {
		name = "execd"
	}
	return fmt.Sprintf("%s %s %s", name, x.r.Method, x.rt.vpath)
}

// checkRequest validates the request against its document, records every
// problem as a violation and returns them.
func (x *exchange) checkRequest() []string {
	if x.rt.doc == nil {
		if !x.rt.execd {
			msg := fmt.Sprintf("request %s %s: path is in neither the lifecycle nor the execd document", x.r.Method, x.r.URL.Path)
			x.s.violate("%s", msg)
		}
		return nil
	}
	ok, errs := x.rt.doc.validator.ValidateHttpRequestSync(x.validationRequest())
	if ok {
		return nil
	}
	var out []string
	for _, e := range errs {
		if e.ValidationType == "path" {
			x.routeMissing = true
		}
		msg := fmt.Sprintf("request %s: %s", x.where(), describe(e))
		x.s.violate("%s", msg)
		out = append(out, describe(e))
	}
	return out
}

// describe flattens a validation error to one line.
func describe(e *liberrors.ValidationError) string {
	var b strings.Builder
	b.WriteString(e.Message)
	if e.Reason != "" && e.Reason != e.Message {
		b.WriteString(" (" + e.Reason + ")")
	}
	for _, f := range e.SchemaValidationErrors {
		fmt.Fprintf(&b, " [%s: %s]", f.FieldPath, f.Reason)
	}
	return b.String()
}

// ruleViolation records a breach of a rule the spec states in prose (not
// expressible in its schemas) and returns its text for the 400 answer.
func (x *exchange) ruleViolation(format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	x.s.violate("request %s: spec rule: %s", x.where(), msg)
	return msg
}

// checkResponse validates the response that was sent.
func (x *exchange) checkResponse(rec *recorder) {
	if x.rt.doc == nil {
		return
	}
	ct := rec.Header().Get("Content-Type")
	body := rec.buf.Bytes()
	if x.synthetic {
		// Proxy-layer answers, faults and rejections: any status, but the
		// body is the document's ErrorResponse.
		schema := lcError
		if x.rt.doc == x.s.ex {
			schema = exError
		}
		if !strings.HasPrefix(ct, "application/json") {
			x.s.violate("response %s %d: content type %q, want application/json ErrorResponse", x.where(), rec.status, ct)
			return
		}
		x.checkSchema(schema, body, fmt.Sprintf("response %s %d: ErrorResponse", x.where(), rec.status))
		return
	}
	if rec.truncated {
		body = nil
	}
	resp := &http.Response{
		StatusCode:    rec.status,
		Header:        rec.Header().Clone(),
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       x.validationRequest(),
	}
	if ok, errs := x.rt.doc.validator.ValidateHttpResponse(resp.Request, resp); !ok {
		for _, e := range errs {
			x.s.violate("response %s %d: %s", x.where(), rec.status, describe(e))
		}
	}
	if strings.HasPrefix(ct, "text/event-stream") {
		for i, ev := range splitEvents(body) {
			x.checkSchema(eventSchema, ev, fmt.Sprintf("response %s %d: event %d", x.where(), rec.status, i))
		}
	}
}

func (x *exchange) checkSchema(schema *base.Schema, body []byte, where string) {
	if !json.Valid(body) {
		x.s.violate("%s: body is not JSON: %.200q", where, body)
		return
	}
	if ok, errs := schemaValidator.ValidateSchemaBytesWithVersion(schema, body, 3.1); !ok {
		for _, e := range errs {
			x.s.violate("%s: %s", where, describe(e))
		}
	}
}

// splitEvents cuts an SSE body into the JSON payloads of its events. The
// reference execd writes each event as bare JSON followed by a blank line;
// "data:" lines (Options.SSEDataPrefix) are accepted too.
func splitEvents(body []byte) [][]byte {
	var out [][]byte
	for _, chunk := range bytes.Split(body, []byte("\n\n")) {
		var payload []byte
		for _, line := range bytes.Split(chunk, []byte("\n")) {
			line = bytes.TrimRight(line, "\r")
			if len(bytes.TrimSpace(line)) == 0 || bytes.HasPrefix(line, []byte(":")) {
				continue
			}
			if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				line = bytes.TrimPrefix(rest, []byte(" "))
			}
			payload = append(payload, line...)
		}
		if len(payload) > 0 {
			out = append(out, payload)
		}
	}
	return out
}

// writeJSON answers a JSON body (through the test response hook).
func (x *exchange) writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	x.s.mu.Lock()
	hook := x.s.respHook
	x.s.mu.Unlock()
	if h := hook; h != nil {
		body = h(x.r, status, body)
	}
	if x.rt.doc == x.s.lc {
		w.Header().Set("X-Request-ID", uuid4())
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

type errorResponse struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (x *exchange) writeError(w http.ResponseWriter, status int, code, message string) {
	x.writeJSON(w, status, errorResponse{Code: code, Message: message})
}
