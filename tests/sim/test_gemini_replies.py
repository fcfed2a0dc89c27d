"""The Gemini stand-in's answers (smg.sim.gemini_replies): scripted text, thoughts and function
calls in Gemini's shapes, stream frames that add up to the whole answer, and the errors a prompt
can ask for."""

from __future__ import annotations

from typing import Any

from smg.sim import gemini_replies as replies
from smg.sim.script import Script, ScriptRule

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
TOOLS = [{"functionDeclarations": [{"name": "get_weather"}]}]


def request(text: str, **extra: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], **extra}


def test_a_scripted_reply_is_one_text_part_with_counts() -> None:
    reply = replies.plan_reply(request("SIM_REPLY: Hello big world"), Script())
    body = replies.whole(reply, "gemini-x", "r1")
    assert body["candidates"] == [
        {
            "content": {"parts": [{"text": "Hello big world"}], "role": "model"},
            "finishReason": "STOP",
            "index": 0,
        }
    ]
    assert body["usageMetadata"] == {
        "promptTokenCount": 4,
        "candidatesTokenCount": 3,
        "totalTokenCount": 7,
    }
    assert (body["modelVersion"], body["responseId"]) == ("gemini-x", "r1")


def test_thoughts_come_only_when_asked_and_calls_only_with_tools() -> None:
    text = f"SIM_REPLY: <think>Need weather.</think>Checking. {CALL}"
    plain = replies.plan_reply(request(text), Script())
    assert plain.parts == ({"text": f"Checking. {CALL}"},)
    thinking = {"thinkingConfig": {"includeThoughts": True}}
    full = replies.plan_reply(request(text, tools=TOOLS, generationConfig=thinking), Script())
    assert full.parts == (
        {"text": "Need weather.", "thought": True},
        {"text": "Checking."},
        {
            "functionCall": {"name": "get_weather", "args": {"city": "Oslo"}},
            "thoughtSignature": replies.SIGNATURE,
        },
    )
    assert full.thought_tokens == 2


def test_max_output_tokens_cuts_the_text_and_candidate_count_repeats_it() -> None:
    config = {"maxOutputTokens": 2, "candidateCount": 3}
    reply = replies.plan_reply(request("SIM_REPLY: a b c d", generationConfig=config), Script())
    body = replies.whole(reply, "m", "r")
    assert [c["finishReason"] for c in body["candidates"]] == ["MAX_TOKENS"] * 3
    assert body["candidates"][2]["content"]["parts"] == [{"text": "a b"}]
    assert body["usageMetadata"]["candidatesTokenCount"] == 6


def test_after_a_signed_function_response_the_script_rules_answer() -> None:
    script = Script((ScriptRule("temp", "It is mild."),))
    answered = {"functionResponse": {"name": "get_weather", "response": {"temp": 9}}}
    contents = [
        {"role": "user", "parts": [{"text": "SIM_REPLY: " + CALL}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {}}}]},
        {"role": "user", "parts": [answered]},
    ]
    unsigned = replies.plan_reply({"contents": contents, "tools": TOOLS}, script).error
    assert unsigned is not None and unsigned["error"]["code"] == 400
    assert "thought_signature" in unsigned["error"]["message"]
    assert "get_weather" in unsigned["error"]["message"]
    for signature in (replies.SIGNATURE, "skip_thought_signature_validator"):
        contents[1]["parts"][0]["thoughtSignature"] = signature
        reply = replies.plan_reply({"contents": contents, "tools": TOOLS}, script)
        assert reply.parts == ({"text": "It is mild."},)


def test_stream_frames_add_up_to_the_whole_answer_and_the_last_one_finishes() -> None:
    thinking = {"thinkingConfig": {"includeThoughts": True}}
    text = "SIM_REPLY: <think>Hmm.</think>one two three four five six seven"
    reply = replies.plan_reply(request(text, generationConfig=thinking), Script())
    frames = list(replies.frames(reply, "m", "r"))
    parts = [p for f in frames for p in f["candidates"][0]["content"]["parts"]]
    assert parts[0] == {"text": "Hmm.", "thought": True}
    assert "".join(p["text"] for p in parts[1:]) == "one two three four five six seven"
    assert ["finishReason" in f["candidates"][0] for f in frames] == [False] * 3 + [True]
    counts = [f["usageMetadata"]["candidatesTokenCount"] for f in frames]
    assert counts == sorted(counts) and counts[-1] == 7 and counts[0] == 0


def test_a_broken_stream_stops_after_its_first_frame_without_a_finish() -> None:
    reply = replies.plan_reply(request("SIM_REPLY: SIM_BREAK a b c d e f g"), Script())
    frames = list(replies.frames(reply, "m", "r"))
    assert len(frames) == 1 and "finishReason" not in frames[0]["candidates"][0]


def test_sim_status_prompts_get_gemini_errors() -> None:
    limited = replies.plan_reply(request("SIM_STATUS: 429"), Script()).error
    assert limited is not None
    assert (limited["error"]["code"], limited["error"]["status"]) == (429, "RESOURCE_EXHAUSTED")
    kinds = [d["@type"].rsplit(".", 1)[1] for d in limited["error"]["details"]]
    assert kinds == ["QuotaFailure", "RetryInfo"]
    overloaded = replies.plan_reply(request("SIM_STATUS: 503"), Script()).error
    assert overloaded is not None and overloaded["error"]["status"] == "UNAVAILABLE"


def test_a_request_without_contents_is_a_400() -> None:
    for bad in ({}, {"contents": "x"}, {"contents": [{"role": "system", "parts": []}]}, []):
        error = replies.plan_reply(bad, Script()).error
        assert error is not None and error["error"]["status"] == "INVALID_ARGUMENT"
