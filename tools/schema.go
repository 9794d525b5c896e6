package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

type kind int

const (
	kindString kind = iota
	kindInteger
	kindEdits
)

// field is one input property. The same table drives validation and the
// JSON Schema, so the two cannot drift apart.
type field struct {
	name        string
	kind        kind
	required    bool
	description string
	min, max    int64  // integer bounds, checked when max > min
	invalid     string // message for a wrong type or out-of-range value; "" for the generic one
	missing     string // message for a missing required field; "" for the generic one
}

type schema []field

// args are validated inputs, keyed by field name.
type args map[string]any

func (a args) str(name string) (string, bool) {
	v, ok := a[name].(string)
	return v, ok
}

func (a args) integer(name string) (int64, bool) {
	v, ok := a[name].(int64)
	return v, ok
}

// edit is one replacement of the edit tool.
type edit struct {
	OldText string `json:"oldText"`
	NewText string `json:"newText"`
}

func (s schema) decode(tool string, input json.RawMessage) (args, error) {
	input = bytes.TrimSpace(input)
	if len(input) == 0 {
		input = []byte("{}")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(input, &raw); err != nil || raw == nil {
		return nil, inputErrorf(tool, "%s input must be a JSON object", tool)
	}
	for key := range raw {
		if s.field(key) == nil {
			return nil, inputErrorf(tool, "%s: unknown field %q", tool, key)
		}
	}
	out := args{}
	for _, f := range s {
		value, present := raw[f.name]
		if !present || string(value) == "null" {
			if f.required {
				return nil, f.missingError(tool)
			}
			continue
		}
		v, err := f.decode(tool, value)
		if err != nil {
			return nil, err
		}
		out[f.name] = v
	}
	return out, nil
}

func (s schema) field(name string) *field {
	for i := range s {
		if s[i].name == name {
			return &s[i]
		}
	}
	return nil
}

func (f *field) missingError(tool string) error {
	if f.missing != "" {
		return inputErrorf(tool, "%s", f.missing)
	}
	return inputErrorf(tool, "%s: %s is required", tool, f.name)
}

func (f *field) invalidError(tool, generic string) error {
	if f.invalid != "" {
		return inputErrorf(tool, "%s", f.invalid)
	}
	return inputErrorf(tool, "%s: %s %s", tool, f.name, generic)
}

func (f *field) decode(tool string, value json.RawMessage) (any, error) {
	switch f.kind {
	case kindString:
		var s string
		if err := json.Unmarshal(value, &s); err != nil {
			return nil, f.invalidError(tool, "must be a string")
		}
		return s, nil
	case kindInteger:
		var n float64
		if err := json.Unmarshal(value, &n); err != nil || n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return nil, f.invalidError(tool, "must be an integer")
		}
		i := int64(n)
		if f.max > f.min && (i < f.min || i > f.max) {
			return nil, f.invalidError(tool, fmt.Sprintf("must be an integer from %d through %d", f.min, f.max))
		}
		return i, nil
	case kindEdits:
		return decodeEdits(tool, f.name, value)
	}
	return nil, fmt.Errorf("field %s has no kind", f.name)
}

func decodeEdits(tool, name string, value json.RawMessage) ([]edit, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(value, &items); err != nil {
		return nil, inputErrorf(tool, "%s: %s must be an array of {oldText, newText} objects", tool, name)
	}
	edits := make([]edit, 0, len(items))
	for i, item := range items {
		dec := json.NewDecoder(bytes.NewReader(item))
		dec.DisallowUnknownFields()
		var e struct {
			OldText *string `json:"oldText"`
			NewText *string `json:"newText"`
		}
		if err := dec.Decode(&e); err != nil {
			return nil, inputErrorf(tool, "%s: %s[%d] must be an object with string oldText and newText and nothing else", tool, name, i)
		}
		if e.OldText == nil || e.NewText == nil {
			return nil, inputErrorf(tool, "%s: %s[%d] needs both oldText and newText", tool, name, i)
		}
		edits = append(edits, edit{OldText: *e.OldText, NewText: *e.NewText})
	}
	return edits, nil
}

func (s schema) jsonSchema() json.RawMessage {
	props := map[string]any{}
	var required []string
	for _, f := range s {
		p := map[string]any{"description": f.description}
		switch f.kind {
		case kindString:
			p["type"] = "string"
		case kindInteger:
			p["type"] = "integer"
			if f.max > f.min {
				p["minimum"], p["maximum"] = f.min, f.max
			}
		case kindEdits:
			p["type"] = "array"
			p["items"] = map[string]any{
				"type":                 "object",
				"additionalProperties": false,
				"required":             []string{"oldText", "newText"},
				"properties": map[string]any{
					"oldText": map[string]any{"type": "string", "description": "Exact text to replace; must occur exactly once in the file"},
					"newText": map[string]any{"type": "string", "description": "Replacement text"},
				},
			}
		}
		props[f.name] = p
		if f.required {
			required = append(required, f.name)
		}
	}
	doc := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		doc["required"] = required
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("tool schema does not marshal: %v", err)) // static data: a bug, not input
	}
	return b
}
