"""The batch reader of the integrations: the documents, padding, label tokens and items of Hugging Face batches,
each case written out by hand."""

from __future__ import annotations

import pytest
import torch

from flopmeter.integrations._batch_reader import describe_batch

PAD = 0


def cu(described):
    return described["cu_seqlens"].tolist()


def test_padded_rows_are_documents_of_their_attention_mask():
    # Two rows of 5 slots, right-padded: 3 and 5 real tokens, 2 padding slots.
    batch = {"input_ids": torch.tensor([[5, 6, 7, PAD, PAD], [5, 6, 7, 8, 9]]),
             "attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]),
             "labels": torch.tensor([[5, 6, 7, -100, -100], [-100, -100, 7, 8, 9]])}
    d = describe_batch(batch, pad_token_id=PAD)
    assert cu(d) == [0, 3, 8]
    assert d["padding_tokens"] == 2 and d["samples"] == 2
    # Targets are labels[:, 1:] != -100: row 0 [6, 7, -, -] -> 2, row 1 [-, 7, 8, 9] -> 3.
    assert d["label_tokens"] == 5


def test_padding_free_tail_from_pad_to_multiple_of_is_padding_not_one_token_documents():
    # TRL's padding-free collator: documents of 3 and 4 tokens flattened, padded to 10 with the pad token at
    # position 0 and label -100 (three one-token "sequences" in cu_seq_lens_q).
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, PAD, PAD, PAD]])
    positions = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 0, 0, 0]])
    labels = torch.tensor([[-100, 6, 7, -100, 9, 10, 11, -100, -100, -100]])
    cu_q = torch.tensor([0, 3, 7, 8, 9, 10], dtype=torch.int32)
    for batch in ({"input_ids": ids, "position_ids": positions, "labels": labels, "cu_seq_lens_q": cu_q},
                  {"input_ids": ids, "position_ids": positions, "labels": labels}):
        d = describe_batch(batch, pad_token_id=PAD)
        assert cu(d) == [0, 3, 7]
        assert d["padding_tokens"] == 3 and d["samples"] == 2
        assert d["label_tokens"] == 5  # 6, 7, 9, 10, 11


def test_without_the_pad_token_a_one_token_tail_stays_a_document():
    ids = torch.tensor([[5, 6, 7, 9]])
    positions = torch.tensor([[0, 1, 2, 0]])
    d = describe_batch({"input_ids": ids, "position_ids": positions}, pad_token_id=PAD)
    assert cu(d) == [0, 3, 4] and d["padding_tokens"] == 0


@pytest.mark.parametrize("rows", [3, 4])
def test_mrope_positions_take_their_first_row(rows):
    # [rows, 1, 6]: the first row restarts at 0 where the second document starts; the others do not (an image's
    # height and width positions), so only the first row is read.
    first = [0, 1, 2, 0, 1, 2]
    other = [0, 1, 1, 1, 2, 3]
    stack = torch.tensor([[first]] + [[other]] * (rows - 1))
    d = describe_batch({"input_ids": torch.ones(1, 6, dtype=torch.int64), "position_ids": stack})
    assert cu(d) == [0, 3, 6]


def test_text_position_ids_come_before_position_ids():
    d = describe_batch({"input_ids": torch.ones(1, 5, dtype=torch.int64),
                        "text_position_ids": torch.tensor([[0, 1, 0, 1, 2]]),
                        "position_ids": torch.tensor([[[0, 1, 2, 3, 4]]] * 3)})
    assert cu(d) == [0, 2, 5]


def test_whole_rows_without_mask_or_positions():
    d = describe_batch({"input_ids": torch.ones(3, 4, dtype=torch.int64)})
    assert cu(d) == [0, 4, 8, 12] and d["padding_tokens"] == 0 and d["samples"] == 3
    assert "label_tokens" not in d


def test_image_and_video_grids_are_the_items():
    d = describe_batch({"input_ids": torch.ones(1, 8, dtype=torch.int64),
                        "image_grid_thw": torch.tensor([[1, 4, 4]]), "video_grid_thw": torch.tensor([[2, 4, 8]])})
    assert d["grid_thw"].tolist() == [[1, 4, 4], [2, 4, 8]]


def test_shift_labels_are_the_targets_when_given():
    d = describe_batch({"input_ids": torch.ones(1, 4, dtype=torch.int64),
                        "labels": torch.tensor([[1, 1, 1, 1]]), "shift_labels": torch.tensor([[1, -100, 1, -100]])})
    assert d["label_tokens"] == 2


def test_a_batch_whose_positions_disagree_with_its_tokens_is_refused_with_the_key():
    with pytest.raises(ValueError, match="position_ids"):
        describe_batch({"input_ids": torch.ones(1, 4, dtype=torch.int64), "position_ids": torch.tensor([[0, 1]])})


def test_not_a_token_batch_gives_none():
    assert describe_batch({"pixel_values": torch.ones(2, 3)}) is None
    assert describe_batch([torch.ones(2)]) is None


def test_axolotl_document_ids_in_the_attention_mask_are_documents():
    # Axolotl's multipack: row 0 holds documents 1 (3 tokens) and 2 (2 tokens) then 1 padding slot; row 1 holds
    # document 1 (4 tokens) and 2 padding slots. Without positions, the ids alone say where documents start.
    mask = torch.tensor([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0]])
    d = describe_batch({"input_ids": torch.ones(2, 6, dtype=torch.int64), "attention_mask": mask})
    assert cu(d) == [0, 3, 5, 9] and d["padding_tokens"] == 3 and d["samples"] == 3


def test_unsloth_packed_seq_lengths_are_the_documents():
    # Unsloth's padding-free batch: one flattened row of 10 slots, documents of 3, 4 and 2 tokens, one slot of
    # padding after them (TRL pads the flattened row); no positions needed.
    d = describe_batch({"input_ids": torch.ones(1, 10, dtype=torch.int64),
                        "packed_seq_lengths": torch.tensor([3, 4, 2], dtype=torch.int32)})
    assert cu(d) == [0, 3, 7, 9] and d["padding_tokens"] == 1 and d["samples"] == 3
    # Packed rows (Unsloth's sample packing): the lengths fill row 0 (5 + 2 of 8 slots, one padding), then row 1
    # (6 of 8 real slots by its mask; 2 padding).
    mask = torch.tensor([[1] * 8, [1] * 6 + [0] * 2])
    d = describe_batch({"input_ids": torch.ones(2, 8, dtype=torch.int64), "attention_mask": mask,
                        "packed_seq_lengths": torch.tensor([5, 2, 6])})
    assert cu(d) == [0, 5, 7, 13] and d["padding_tokens"] == 3


def test_packed_seq_lengths_that_do_not_fit_are_refused_by_name():
    with pytest.raises(ValueError, match="packed_seq_lengths"):
        describe_batch({"input_ids": torch.ones(1, 4, dtype=torch.int64),
                        "packed_seq_lengths": torch.tensor([3, 3])})
