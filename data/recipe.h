/* recipe.h: the defaults of doc/recipe.md (DeiT's ImageNet recipe as ViM trains it) that more
 * than one module starts from: the training config (train/train_config.c), the transforms
 * (data/transform_*.c), Mixup (data/mixup.c), the loader (data/loader.c) and evaluation
 * (eval/eval.c) all take them from here. */
#ifndef VIL_RECIPE_H
#define VIL_RECIPE_H

/* evaluation: resize to size / crop_pct (bicubic), center crop */
#define VIL_RECIPE_CROP_PCT 0.875f
/* normalization: ImageNet's mean and std; one channel takes the mean of the three */
#define VIL_RECIPE_MEAN {0.485f, 0.456f, 0.406f}
#define VIL_RECIPE_STD {0.229f, 0.224f, 0.225f}
#define VIL_RECIPE_GRAY_MEAN 0.449f
#define VIL_RECIPE_GRAY_STD 0.226f
/* training augmentation: RandomResizedCrop scale (scale_min, 1), flip, RandAugment
 * rand-m9-mstd0.5-inc1, random erasing, repeated augmentation */
#define VIL_RECIPE_SCALE_MIN 0.08f
#define VIL_RECIPE_HFLIP 0.5f
#define VIL_RECIPE_RANDAUG_N 2
#define VIL_RECIPE_RANDAUG_M 9.0f
#define VIL_RECIPE_RANDAUG_MSTD 0.5f
#define VIL_RECIPE_REPROB 0.25f
#define VIL_RECIPE_REPEATS 3
/* Mixup 0.8 / CutMix 1.0 on every batch, half of them each; label smoothing */
#define VIL_RECIPE_MIXUP 0.8f
#define VIL_RECIPE_CUTMIX 1.0f
#define VIL_RECIPE_MIXUP_PROB 1.0f
#define VIL_RECIPE_MIXUP_SWITCH_PROB 0.5f
#define VIL_RECIPE_SMOOTHING 0.1f
/* data loader threads */
#define VIL_RECIPE_WORKERS 4

#endif
