"""Multi-paragraph Chinese, Japanese, Korean and mixed markdown written for the CJK tests.

Each document has words found in no other one, so a query's right answer is known
independently of the search: the word list beside each text names them.
"""

from __future__ import annotations

CJK_DOCS: dict[str, str] = {
    "zh/garden.md": """# 城市花园

在城市里种菜并不难。阳台上放几个花盆，就可以种番茄、辣椒和香菜。每天早上浇水，
注意阳光和通风，植物就会长得很好。

## 土壤

好的土壤是成功的一半。把厨房里的果皮和茶叶做成堆肥，可以让土壤更加肥沃。
不要使用太多化肥，否则根系会受伤。

## 收获

夏天结束的时候，番茄变红了。邻居们一起分享收获，大家都很高兴。
""",
    "ja/travel.md": """# 京都の旅

京都には古いお寺がたくさんあります。秋になると紅葉がとてもきれいで、多くの観光客が訪れます。
朝早く出かけると、静かな境内をゆっくり散歩できます。

## 食べ物

湯豆腐や抹茶のお菓子が有名です。駅の近くの小さな店で、おいしいお弁当を買いました。

## 移動

市内の移動にはバスが便利ですが、混雑することもあります。自転車を借りるのもおすすめです。
""",
    "ko/cooking.md": """# 김치 만들기

김치는 한국의 대표적인 발효 음식입니다. 배추를 소금에 절이고 양념을 골고루 바릅니다.

## 양념

고춧가루와 마늘, 생강, 젓갈을 섞어서 양념을 만듭니다. 맛을 보면서 소금의 양을 조절합니다.

## 보관

완성된 김치는 냉장고에 보관합니다. 며칠이 지나면 맛있게 익습니다.
""",
    "mixed/deploy.md": """# Deploying the service

The service runs behind a reverse proxy. Configure the upstream port before you start it.

## 部署说明

使用 Docker 部署服务时，请先检查配置文件。日志会写入 /var/log 目录，方便排查故障。

## デプロイ手順

コンテナを起動する前に、環境変数を設定してください。ヘルスチェックは自動で実行されます。
""",
    "en/notes.md": """# Release notes

Version 2 adds a reverse proxy example and faster startup. The upstream port is now
configurable, and the health check runs automatically after every deploy.
""",
}

# query -> the one document whose text contains it (as a substring, inside running text).
CJK_WORDS: dict[str, str] = {
    "番茄": "zh/garden.md",
    "土壤": "zh/garden.md",
    "堆肥": "zh/garden.md",
    "紅葉": "ja/travel.md",
    "お弁当": "ja/travel.md",
    "自転車": "ja/travel.md",
    "観光客": "ja/travel.md",
    "배추": "ko/cooking.md",
    "양념": "ko/cooking.md",
    "냉장고": "ko/cooking.md",
    "排查故障": "mixed/deploy.md",
    "環境変数": "mixed/deploy.md",
}
