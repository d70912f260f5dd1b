#!/bin/bash
# Llama 3 70B pre-training with Megatron-Core on 8 DGX-H100 nodes (64 GPUs), FP8 (delayed
# scaling), TP 4 x PP 8 (5 virtual stages) x DP 2, micro batch 1, global batch 128, 8k tokens.
#
# Written in the form NVIDIA publishes its Megatron-LM launch scripts: the structure, argument
# arrays and torchrun line of NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh, with
# the 70B run of NVIDIA's Megatron-Bridge performance recipe (scripts/performance/configs/llama3/
# llama3_llm_pretrain.py llama3_70b_h100_config and src/megatron/bridge/recipes/llama/llama3.py
# llama3_70b_pretrain_config: the layout, FP8 with fp8_param_gather, TP communication overlap,
# the distributed optimizer with overlapped gradient reduce and parameter gather, bf16 gradient
# reduction, no dropout), which NVIDIA's performance summary (release 25.09, DGX-H100) reports
# at 1619 tokens/s/GPU. The Llama 3 70B shape is meta-llama/Meta-Llama-3-70B's config.json.
# The tokenizer's 128256 entries are padded to 128512 (a multiple of 128 x TP 4), in Megatron-LM
# as in the recipe. The TP overlap's userbuffers settings are the recipe's, in the file beside
# this script (userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192.yaml).
# The same run as scenarios/h100/llama3-70b_fp8_tp4_pp8_vp5_dp2_r25.09.yaml; import it with
#   trainsim import-megatron examples/launch/llama3_70b_h100_fp8.sh --system dgx-h100
# (docs/cli.md "import-megatron").

# Environment variables for performance tuning
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
export NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-19}

CHECKPOINT_PATH=${1:-"checkpoints/llama3_70b_fp8"}
TENSORBOARD_LOGS_PATH=${2:-"tensorboard_logs/llama3_70b_fp8"}
TOKENIZER_MODEL=${3:-"meta-llama/Meta-Llama-3-70B"}
# Transformer Engine's userbuffers settings of the TP overlap (the recipe's tp_comm_overlap_cfg)
TP_COMM_OVERLAP_CFG=${TP_COMM_OVERLAP_CFG:-"userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192.yaml"}

# Distributed training setup
GPUS_PER_NODE=8
NUM_NODES=8
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-6000}
NODE_RANK=${NODE_RANK:-0}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

PRETRAIN_SCRIPT_PATH="pretrain_gpt.py"

# Fixed model and training parameters
TP_SIZE=4
PP_SIZE=8
VP_SIZE=5
CP_SIZE=1
MICRO_BATCH_SIZE=1
GLOBAL_BATCH_SIZE=128
NUM_LAYERS=80
SEQ_LENGTH=8192
MAX_POSITION_EMBEDDINGS=8192

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --node_rank $NODE_RANK
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

MODEL_ARGS=(
    --use-mcore-models
    --transformer-impl transformer_engine
    --num-layers $NUM_LAYERS
    --hidden-size 8192
    --ffn-hidden-size 28672
    --num-attention-heads 64
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $MAX_POSITION_EMBEDDINGS
    --position-embedding-type rope
    --rotary-base 500000
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --attention-backend flash
    --init-method-std 0.008
)

TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --train-iters 100
    --lr 1.5e-4
    --min-lr 1.5e-5
    --lr-decay-style cosine
    --lr-warmup-iters 10
    --clip-grad 1.0
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --optimizer adam
    --bf16
    --grad-reduce-in-bf16
)

# FP8 with delayed scaling (Transformer Engine)
DTYPE_ARGS=(
    "--fp8-format hybrid"
    "--fp8-recipe delayed"
    "--fp8-amax-history-len 1024"
    "--fp8-amax-compute-algo max"
    "--fp8-param-gather"
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --pipeline-model-parallel-size $PP_SIZE
    --virtual-pipeline-model-parallel-size $VP_SIZE
    --context-parallel-size $CP_SIZE
    --sequence-parallel
    --tp-comm-overlap
    --tp-comm-overlap-cfg $TP_COMM_OVERLAP_CFG
)

DDP_ARGS=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS+=("${DDP_ARGS[@]}")

DATA_ARGS_LIST=(
    "--mock-data"
    "--tokenizer-type HuggingFaceTokenizer"
    "--tokenizer-model $TOKENIZER_MODEL"
    "--vocab-size 128256"
    "--split '99,1,0'"
    "--num-workers 1"
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --log-throughput
    --eval-iters 0
    --eval-interval 1000
    --save-interval 1000
    --ckpt-format torch_dist
    --distributed-timeout-minutes 60
    --save "$CHECKPOINT_PATH"
    --load "$CHECKPOINT_PATH"
    --tensorboard-dir "$TENSORBOARD_LOGS_PATH"
)

torchrun ${DISTRIBUTED_ARGS[@]} \
    "$PRETRAIN_SCRIPT_PATH" \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS_LIST[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}
