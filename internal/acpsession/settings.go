package acpsession

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	acp "github.com/coder/acp-go-sdk"
)

// offer is what the agent currently offers to set: its modes and config
// options. The reader keeps it current, in wire order, from the responses
// to new/load session, set_mode and set_config_option, and from
// current_mode_update and config_option_update notifications. Its slices
// are replaced, never changed in place, so a copy is a snapshot.
type offer struct {
	hasModes    bool
	modes       []string // available mode ids
	currentMode string
	options     []configOption
}

// modesOffer is the "modes" object of a new/load session response.
type modesOffer struct {
	CurrentModeID  string `json:"currentModeId"`
	AvailableModes []struct {
		ID string `json:"id"`
	} `json:"availableModes"`
}

// configOption is the lean view of an ACP SessionConfigOption.
type configOption struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Category string          `json:"category"`
	Current  json.RawMessage `json:"currentValue"`
	Options  []selectValue   `json:"options"`
}

// selectValue is a select option, or a group of them.
type selectValue struct {
	Value   string        `json:"value"`
	Options []selectValue `json:"options"`
}

func newOffer(m *modesOffer, opts *[]configOption) offer {
	var o offer
	if m != nil {
		o.hasModes = true
		o.currentMode = m.CurrentModeID
		for _, am := range m.AvailableModes {
			o.modes = append(o.modes, am.ID)
		}
	}
	if opts != nil {
		o.options = *opts
	}
	return o
}

// values lists a select option's value ids, groups flattened.
func (c *configOption) values() []string {
	var out []string
	for _, v := range c.Options {
		if len(v.Options) > 0 {
			for _, g := range v.Options {
				out = append(out, g.Value)
			}
			continue
		}
		out = append(out, v.Value)
	}
	return out
}

// find returns the first option with one of ids, else the first of category.
func (o *offer) find(ids []string, category string) *configOption {
	for _, id := range ids {
		for i := range o.options {
			if o.options[i].ID == id {
				return &o.options[i]
			}
		}
	}
	if category != "" {
		for i := range o.options {
			if o.options[i].Category == category {
				return &o.options[i]
			}
		}
	}
	return nil
}

func (o *offer) byID(id string) *configOption {
	for i := range o.options {
		if o.options[i].ID == id {
			return &o.options[i]
		}
	}
	return nil
}

// matchID finds value among ids: an equal id, else one ending in "#"+value
// (copilot's mode ids are URLs ending in #agent).
func matchID(ids []string, value string) (string, bool) {
	if value == "" {
		return "", false
	}
	for _, id := range ids {
		if id == value {
			return id, true
		}
	}
	for _, id := range ids {
		if strings.HasSuffix(id, "#"+value) {
			return id, true
		}
	}
	return "", false
}

func (s *Session) snapshotOffer() offer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.offer
}

// applied records how one setting was put in force, to verify pins.
type applied struct {
	setting  Setting
	modeID   string // set with session/set_mode
	optionID string // set with session/set_config_option
	value    string // the select value id set
	boolean  bool   // optionID is a boolean option, set to *setting.Bool
}

// Value ids of a select that stands for a boolean (an agent may render a
// boolean setting as a select: cline's auto_approve), matched by id.
var (
	falseValues = []string{"false", "off", "disabled"}
	trueValues  = []string{"true", "on", "enabled"}
)

// resolve decides how st would be put in force against off: through a
// config option when one offers the value, else (for a mode) through
// session/set_mode. A mode config option is preferred over set_mode when
// both offer the value: ACP's v2 draft removes session/set_mode. ok is
// false when st is offered but not its value; a.optionID and a.modeID are
// both empty when st is not offered at all.
func resolve(off *offer, st Setting) (a applied, offered bool) {
	a.setting = st
	modesOffered := st.Mode && off.hasModes && len(off.modes) > 0
	opt := off.find(st.ConfigIDs, st.category())
	if !modesOffered && opt == nil {
		return a, false
	}
	if opt != nil {
		switch {
		case st.Bool != nil && opt.Type == "boolean":
			a.optionID, a.boolean = opt.ID, true
		case st.Bool != nil:
			words := falseValues
			if *st.Bool {
				words = trueValues
			}
			if v, ok := matchWord(opt.values(), words); ok {
				a.optionID, a.value = opt.ID, v
			}
		case opt.Type != "boolean":
			if v, ok := matchID(opt.values(), st.Value); ok {
				a.optionID, a.value = opt.ID, v
			}
		}
	}
	if a.optionID == "" && modesOffered && st.Bool == nil {
		a.modeID, _ = matchID(off.modes, st.Value)
	}
	return a, true
}

// category is the config option category that carries st when none of its
// ids is offered: a mode setting falls back to the option of category mode.
func (st Setting) category() string {
	if st.Mode && st.Category == "" {
		return "mode"
	}
	return st.Category
}

// matchWord finds the first of ids equal to one of words, case ignored.
func matchWord(ids, words []string) (string, bool) {
	for _, id := range ids {
		for _, w := range words {
			if strings.EqualFold(id, w) {
				return id, true
			}
		}
	}
	return "", false
}

// applySettings applies p.Settings in order against the agent's current
// offer, then checks that every pin is in force.
func (s *Session) applySettings(ctx context.Context, sid acp.SessionId, settings []Setting) error {
	var done []applied
	for _, st := range settings {
		a, err := s.applySetting(ctx, sid, st)
		if err != nil {
			return err
		}
		done = append(done, a)
	}
	final := s.snapshotOffer()
	for _, a := range done {
		if !a.setting.Pin {
			continue
		}
		if a.modeID != "" && final.currentMode != a.modeID {
			return fmt.Errorf("setting %q is not in force: the agent reports mode %q, not %q", a.setting.Name, final.currentMode, a.modeID)
		}
		if a.optionID == "" {
			continue
		}
		opt := final.byID(a.optionID)
		if opt == nil {
			return fmt.Errorf("setting %q is not in force: the agent no longer offers config option %q", a.setting.Name, a.optionID)
		}
		if a.boolean {
			var cur bool
			if json.Unmarshal(opt.Current, &cur) != nil || cur != *a.setting.Bool {
				return fmt.Errorf("setting %q is not in force: the agent reports %s = %s, not %t", a.setting.Name, a.optionID, opt.Current, *a.setting.Bool)
			}
			continue
		}
		var cur string
		if json.Unmarshal(opt.Current, &cur) != nil || cur != a.value {
			return fmt.Errorf("setting %q is not in force: the agent reports %s = %s, not %q", a.setting.Name, a.optionID, opt.Current, a.value)
		}
	}
	return nil
}

func (s *Session) applySetting(ctx context.Context, sid acp.SessionId, st Setting) (applied, error) {
	off := s.snapshotOffer()
	a, offered := resolve(&off, st)
	if !offered {
		return a, fmt.Errorf("setting %q is not offered by the agent", st.Name)
	}
	if a.modeID == "" && a.optionID == "" {
		return a, fmt.Errorf("value %q is not offered for setting %q", valueText(st), st.Name)
	}
	if a.modeID != "" {
		err := s.call(ctx, "set_mode", func(ctx context.Context) error {
			_, err := s.conn.SetSessionMode(ctx, acp.SetSessionModeRequest{SessionId: sid, ModeId: acp.SessionModeId(a.modeID)})
			return err
		})
		if err != nil {
			return a, settingErr(st, err)
		}
		return a, nil
	}
	req := acp.SetSessionConfigOptionRequest{}
	if a.boolean {
		req.Boolean = &acp.SetSessionConfigOptionBoolean{
			SessionId: sid, ConfigId: acp.SessionConfigId(a.optionID), Type: "boolean", Value: *st.Bool,
		}
	} else {
		req.ValueId = &acp.SetSessionConfigOptionValueId{
			SessionId: sid, ConfigId: acp.SessionConfigId(a.optionID), Value: acp.SessionConfigValueId(a.value),
		}
	}
	err := s.call(ctx, "set_config_option", func(ctx context.Context) error {
		_, err := s.conn.SetSessionConfigOption(ctx, req)
		return err
	})
	if err != nil {
		return a, settingErr(st, err)
	}
	return a, nil
}

// settingErr names the setting in an error the agent answered with; other
// errors (timeouts, cancellation, a lost connection) already say enough.
func settingErr(st Setting, err error) error {
	if ae, ok := err.(*agentError); ok {
		return fmt.Errorf("agent rejected %s %q for setting %q: %s", ae.request, valueText(st), st.Name, ae.text)
	}
	return err
}

func valueText(st Setting) string {
	if st.Bool != nil {
		return strconv.FormatBool(*st.Bool)
	}
	return st.Value
}

// modeIDs lists the mode ids the agent offers: its session modes and the
// values of its mode config option.
func (o *offer) modeIDs() []string {
	ids := slices.Clone(o.modes)
	for i := range o.options {
		if c := &o.options[i]; c.ID == "mode" || c.Category == "mode" {
			ids = append(ids, c.values()...)
		}
	}
	return ids
}
