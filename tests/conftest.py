import os
import shutil
import tempfile

# No compilation cache in the user's folder: the CLI subprocesses (they inherit this) do not turn on
# their per-user cache. tests/test_cache.py clears these variables for its own checks.
os.environ.setdefault("WUJI_JAX_NO_CACHE", "1")
# The verbs' Inspire commands by the joint map unless a test names --command-map: the task-space
# retarget's program compiled in every CLI test's process doubled their time (its tests name it).
os.environ.setdefault("WUJI_JAX_COMMAND_MAP", "joint_map")
# One fresh persistent compilation cache for this run, shared by the pytest workers, the CLI and
# notebook subprocesses (JAX reads these variables at start-up): a program compiled by one process is
# loaded by the others. Every run starts empty, so the suite compiles the same on every run.
if "WUJI_JAX_TEST_XLA_CACHE" not in os.environ:  # the controller; pytest-xdist workers inherit it
    os.environ["WUJI_JAX_TEST_XLA_CACHE"] = tempfile.mkdtemp(prefix="wuji-jax-test-xla-")
    _OWN_CACHE = True
else:
    _OWN_CACHE = False
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ["WUJI_JAX_TEST_XLA_CACHE"]
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.5"

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.devices()  # start JAX here (one CPU device), so that no in-process CLI call changes the device count


@pytest.fixture(scope="session")
def right():
    import wuji_jax as wj

    return wj.load_hand("right")


@pytest.fixture(scope="session")
def left():
    import wuji_jax as wj

    return wj.load_hand("left")


# The order in which pytest-xdist hands out the test files (pyproject.toml: --dist loadfile with
# --no-loadscope-reorder gives them out in this order as the two workers free up): longest first, so
# that the two workers finish together, with moves for the compilation cache the workers share (a
# program one worker is still compiling is compiled again by the other). Seconds of test time per file
# in a 2-worker run of the suite on a 2-core CPU (--durations=0, 886 s in all, 503 s wall): ray 92,
# solver 91, gradients 87, notebooks 68, batch 66, retarget 62, inspire 51, core 48, readme 45,
# kinematics 44, devices 37, realtime 37, sequence_calibration 36, live 26, the rest under 25 each.
# * batch goes second: its first test compiles the dataset runner's small-job program (float64, one
#   device, 64 rows), which test_ray's fresh-run test (a minute into ray on the other worker) reads.
# * solver before notebooks: 03_learning's kernel (float64) reads the 64-frame solver programs.
# * realtime, then inspire, then chain, each handed out well after the one before: they compile the
#   same FrameSolver, to_inspire and solve_sequence programs (inspire 10 s and chain 5 s after
#   realtime on one worker; inspire 25 s and chain 18 s when inspire and chain ran side by side).
# The short files come last.
_LONGEST_FIRST = ("ray", "batch", "solver", "gradients", "notebooks", "retarget", "kinematics", "core", "readme",
                  "realtime", "devices", "inspire", "sequence_calibration", "live", "cache", "viewer", "video", "chain",
                  "output_rule", "overlay", "data_safety", "cli_pose", "io", "viz", "model", "packaging")


def pytest_collection_modifyitems(config, items):
    _mark_slow(items)
    rank = {f"test_{name}.py": i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0].rsplit("/", 1)[-1], len(rank)))


def pytest_unconfigure(config):
    if _OWN_CACHE and not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ["WUJI_JAX_TEST_XLA_CACHE"], ignore_errors=True)


# The fast lane (pytest -m "not slow", <= 60 s on 2 cores) leaves out what compiles whole solver programs
# or runs whole processes: these files entirely, and these tests (each several seconds in a suite run).
_SLOW_FILES = {"test_devices.py", "test_gradients.py", "test_live.py", "test_notebooks.py", "test_overlay.py", "test_ray.py", "test_readme.py", "test_realtime.py", "test_retarget.py", "test_sequence_calibration.py"}
_SLOW_TESTS = {
    "test_batch.py::test_command_map_in_summary_and_identity",
    "test_batch.py::test_console_script_skips_the_teardown_after_solve_and_loses_nothing",
    "test_batch.py::test_kernel_compiles_once_for_any_length",
    "test_batch.py::test_outputs_readable_with_expected_columns",
    "test_batch.py::test_parquet_writer_builds_its_columns_without_pandas",
    "test_batch.py::test_sharded_over_four_host_devices_matches_one",
    "test_cache.py::test_cli_caches_by_default_and_obeys_its_options",
    "test_cache.py::test_cli_no_cache",
    "test_cache.py::test_cli_unusable_folder_is_a_one_line_warning",
    "test_cache.py::test_explicit_path_beats_the_environment",
    "test_cache.py::test_no_cache_in_a_fresh_process",
    "test_cache.py::test_programs_are_written_then_read_back",
    "test_cache.py::test_small_programs_are_compiled_quickly",
    "test_cache.py::test_traced_programs_are_kept_and_read_back_without_tracing",
    "test_chain.py::test_cli_invalid_frames_sources_and_sides",
    "test_chain.py::test_inspire_landmarks_bundled_sample",
    "test_chain.py::test_solve_inspire_view_pose",
    "test_cli_pose.py::test_angles_file_frame",
    "test_cli_pose.py::test_python_m_list",
    "test_core.py::test_changing_numbers_does_not_recompile",
    "test_core.py::test_fk_jacobian_matches_jacfwd",
    "test_core.py::test_landmark_loss_gradient_of_a_large_batch_matches_single_frames",
    "test_core.py::test_landmark_loss_is_the_lm_cost_at_the_solution",
    "test_core.py::test_non_finite_fits_are_flagged_not_reported_valid",
    "test_core.py::test_the_lm_loop_holds_the_only_keypoint_and_jacobian_evaluation",
    "test_inspire.py::test_clamped_batched_jitted_and_dtype",
    "test_inspire.py::test_cli_command_map",
    "test_inspire.py::test_cli_solves_landmarks_on_the_way",
    "test_inspire.py::test_gradients_finite_and_exact",
    "test_inspire.py::test_poses_solved_back_from_landmarks",
    "test_inspire.py::test_rh56_scale",
    "test_kinematics.py::test_batch_shapes",
    "test_kinematics.py::test_dtypes",
    "test_kinematics.py::test_fk_matches_independent_chain",
    "test_kinematics.py::test_gradient_through_model_leaves",
    "test_kinematics.py::test_jacobians_three_ways",
    "test_kinematics.py::test_large_batch_gradients_match_single_frames",
    "test_kinematics.py::test_zero_pose_equals_table_offsets",
    "test_output_rule.py::test_sigint_while_compiling_exits_130_and_the_rerun_finishes",
    "test_output_rule.py::test_stale_lock_takeover_races_between_processes",
    "test_solver.py::test_batch_size_invariance",
    "test_solver.py::test_batches_are_padded_by_at_most_one_chunk",
    "test_solver.py::test_chunks_and_the_start_between_two_programs",
    "test_solver.py::test_closed_form_start_is_exact_on_noise_free_data",
    "test_solver.py::test_contract_and_products_match_einsum",
    "test_solver.py::test_fist_frames_converge_in_two_iterations",
    "test_solver.py::test_float32_atan2_matches_numpy",
    "test_solver.py::test_float32_default_dtype_round_trip",
    "test_solver.py::test_float32_sincos_matches_numpy",
    "test_solver.py::test_optax_solves_the_same_problem",
    "test_solver.py::test_round_trip_recovers_angles_pose_and_scale",
    "test_solver.py::test_soft_coupling_follows_the_law_on_exact_data",
    "test_solver.py::test_solve_inside_jit_then_eager_same_answer",
    "test_solver.py::test_sums_are_written_for_the_platform_compiled_for",
    "test_solver.py::test_take_matches_numpy_indexing",
    "test_video.py::test_mediapipe_native_logs_are_silenced",
    "test_viewer.py::test_browser_hostile_names_run_no_script",
    "test_viewer.py::test_browser_left_coupled_joint",
    "test_viewer.py::test_browser_right_select_and_pose",
    "test_viz.py::test_draw_hand_compiles_one_program",
}


def _mark_slow(items):
    for item in items:
        path, _, name = item.nodeid.partition("::")
        file = path.rsplit("/", 1)[-1]
        if file in _SLOW_FILES or f"{file}::{name.split('[')[0]}" in _SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
